import { constants, closeSync, fstatSync, openSync, readFileSync, writeFileSync, writeSync } from "node:fs";
import { createPrivateKey, createPublicKey, generateKeyPairSync, type KeyObject } from "node:crypto";
import { join } from "node:path";
import { keyFingerprint } from "./envelope.js";

/** The file names of a node's key pair inside its data directory. */
export const NODE_KEY_FILE = "node-key.pem";
export const NODE_PUBLIC_KEY_FILE = "node-key.pub";

/** An executor node's signing identity. */
export interface NodeKey {
  readonly privateKey: KeyObject;
  /** SPKI PEM, what a verifier is given. */
  readonly publicKeyPem: string;
  /** SHA-256 of the SPKI DER, hex: the DSSE key id. */
  readonly fingerprint: string;
  /** True when this call generated the pair. */
  readonly created: boolean;
}

/**
 * Loads the node's Ed25519 key from `<dataDir>/node-key.pem`, or generates one there at first
 * start (0600, created exclusively, so two starts never write two keys), and writes its public
 * half to `node-key.pub` (0644). Refuses a key file that is not a regular file of this uid, is
 * readable by group or others, or is not Ed25519: a key others could read proves nothing.
 */
export function loadOrCreateNodeKey(dataDir: string): NodeKey {
  const path = join(dataDir, NODE_KEY_FILE);
  let fd: number;
  let created = false;
  try {
    fd = openSync(path, constants.O_RDWR | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600);
    created = true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "EEXIST") throw err;
    fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW);
  }
  try {
    let pem: string | undefined;
    if (created) {
      pem = generateKeyPairSync("ed25519").privateKey.export({ type: "pkcs8", format: "pem" }) as string;
      writeSync(fd, pem);
    }
    const st = fstatSync(fd);
    if (!st.isFile()) throw new Error(`${path} is not a regular file`);
    if (typeof process.getuid === "function" && st.uid !== process.getuid()) throw new Error(`${path} is owned by uid ${st.uid}, not by this process (uid ${process.getuid()})`);
    if ((st.mode & 0o077) !== 0) throw new Error(`${path} has mode ${(st.mode & 0o777).toString(8)}; a node key must be 0600 (chmod 600 ${path})`);
    const privateKey = createPrivateKey(pem ?? readFileSync(fd, "utf8"));
    if (privateKey.asymmetricKeyType !== "ed25519") throw new Error(`${path} holds a ${privateKey.asymmetricKeyType} key, not Ed25519`);
    const publicKeyPem = createPublicKey(privateKey).export({ type: "spki", format: "pem" }) as string;
    writeFileSync(join(dataDir, NODE_PUBLIC_KEY_FILE), publicKeyPem, { mode: 0o644 });
    return { privateKey, publicKeyPem, fingerprint: keyFingerprint(privateKey), created };
  } finally {
    closeSync(fd);
  }
}
