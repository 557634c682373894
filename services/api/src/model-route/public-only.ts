import { BlockList, isIP, type LookupFunction } from "node:net";
import { lookup as dnsLookup } from "node:dns";
import { Agent } from "undici";

/**
 * Addresses a public-only model route may not reach: loopback, unspecified, RFC 1918 private,
 * carrier-grade NAT, link-local, benchmarking, multicast and reserved IPv4; IPv6 loopback,
 * unspecified, unique-local, link-local, site-local (deprecated) and multicast; an IPv4-mapped
 * IPv6 address is judged by its IPv4 part.
 */
const NOT_PUBLIC = (() => {
  const b = new BlockList();
  for (const [net, bits] of [["0.0.0.0", 8], ["10.0.0.0", 8], ["100.64.0.0", 10], ["127.0.0.0", 8], ["169.254.0.0", 16], ["172.16.0.0", 12], ["192.0.0.0", 24], ["192.168.0.0", 16], ["198.18.0.0", 15], ["224.0.0.0", 4], ["240.0.0.0", 4]] as const) b.addSubnet(net, bits, "ipv4");
  for (const [net, bits] of [["::", 128], ["::1", 128], ["fc00::", 7], ["fe80::", 10], ["fec0::", 10], ["ff00::", 8]] as const) b.addSubnet(net, bits, "ipv6");
  return b;
})();

/** True when `address` (an IP literal) is one a public-only route may not reach. */
export function isNonPublicAddress(address: string): boolean {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  if (mapped) return NOT_PUBLIC.check(mapped[1]!, "ipv4");
  const family = isIP(address);
  if (family === 0) return true;
  return NOT_PUBLIC.check(address, family === 4 ? "ipv4" : "ipv6");
}

/** The refusal a public-only lookup raises: the connection is never made. */
export class NonPublicAddressError extends Error {
  readonly code = "ESERAPH_NON_PUBLIC";
  constructor(
    readonly host: string,
    readonly address: string,
  ) {
    super(`${host} resolves to ${address}, a loopback, private, link-local or otherwise non-public address`);
    this.name = "NonPublicAddressError";
  }
}

/**
 * The DNS lookup a public-only connection uses: the addresses the connection will use are the
 * ones checked (no second resolution a rebinding DNS server could answer differently), and any
 * non-public one refuses the whole host.
 */
const publicLookup: LookupFunction = (hostname, options, callback) => {
  dnsLookup(hostname, { ...options, all: true }, (err, addresses) => {
    if (err) return callback(err, "", 0);
    const bad = addresses.find((a) => isNonPublicAddress(a.address));
    if (bad) return callback(new NonPublicAddressError(hostname, bad.address), "", 0);
    if (options.all) return (callback as unknown as (e: null, a: typeof addresses) => void)(null, addresses);
    const first = addresses[0]!;
    callback(null, first.address, first.family);
  });
};

/** An undici dispatcher whose every connection resolves through publicLookup (IP literals are checked by the caller). */
export function publicOnlyDispatcher(): Agent {
  return new Agent({ connect: { lookup: publicLookup } });
}
