import { createHash, createPublicKey, sign, type KeyObject } from "node:crypto";
import { crypto as sigstoreCrypto, dsse } from "@sigstore/core";

/** DSSE payload type of an in-toto Statement. */
export const IN_TOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json";
/** in-toto Statement v1. */
export const STATEMENT_TYPE = "https://in-toto.io/Statement/v1";

/** One attested artifact: its name (as stored with the job) and SHA-256. */
export interface Subject {
  readonly name: string;
  readonly digest: { readonly sha256: string };
}

/** An in-toto Statement v1 with a predicate of type P. */
export interface Statement<P> {
  readonly _type: typeof STATEMENT_TYPE;
  readonly subject: readonly Subject[];
  readonly predicateType: string;
  readonly predicate: P;
}

/** A DSSE envelope (JSON form). */
export interface Envelope {
  readonly payloadType: string;
  /** Base64 of the serialized Statement. */
  readonly payload: string;
  readonly signatures: ReadonlyArray<{ readonly keyid: string; readonly sig: string }>;
}

/** Why an attestation does not verify: a stable code and a sentence. */
export class AttestationError extends Error {
  /** The stable code (envelope_malformed, signature_invalid, subject_digest_mismatch, ...). */
  readonly reason: string;
  constructor(reason: string, message: string) {
    super(message);
    this.name = "AttestationError";
    this.reason = reason;
  }
}

/** The key id of a public key: SHA-256 of its SubjectPublicKeyInfo (DER), in hex. */
export function keyFingerprint(key: KeyObject | string): string {
  const pub = typeof key === "string" ? createPublicKey(key) : key.type === "private" ? createPublicKey(key) : key;
  return createHash("sha256").update(pub.export({ type: "spki", format: "der" })).digest("hex");
}

/** SHA-256 of bytes, in hex. */
export function sha256Hex(bytes: Uint8Array): string {
  return createHash("sha256").update(bytes).digest("hex");
}

/** Signs `statement` with an Ed25519 private key: a DSSE envelope over its JSON. */
export function signStatement<P>(statement: Statement<P>, privateKey: KeyObject): Envelope {
  if (privateKey.asymmetricKeyType !== "ed25519") throw new Error(`attestation keys are Ed25519, not ${privateKey.asymmetricKeyType}`);
  const payload = Buffer.from(JSON.stringify(statement), "utf8");
  const sig = sign(null, dsse.preAuthEncoding(IN_TOTO_PAYLOAD_TYPE, payload), privateKey);
  return { payloadType: IN_TOTO_PAYLOAD_TYPE, payload: payload.toString("base64"), signatures: [{ keyid: keyFingerprint(privateKey), sig: sig.toString("base64") }] };
}

/** What a verified attestation holds. */
export interface Verified<P> {
  readonly statement: Statement<P>;
  /** The key id of the signature that verified. */
  readonly keyid: string;
}

/**
 * Verifies a DSSE envelope (its JSON text) against an Ed25519 public key (PEM): the envelope's
 * shape, canonical base64 everywhere, a signature naming that key (`keyid`, its fingerprint) and
 * made by it over the pre-authentication encoding, the Statement's shape and
 * `predicateType`, and, for every artifact given, that a subject of that name has its SHA-256.
 * Throws AttestationError with the first problem.
 */
export function verifyEnvelope<P>(
  envelopeJson: string,
  publicKeyPem: string,
  o: { readonly predicateType: string; readonly artifacts?: ReadonlyMap<string, Uint8Array> },
): Verified<P> {
  const envelope = parseEnvelope(envelopeJson);
  const key = publicKey(publicKeyPem);
  const keyid = keyFingerprint(key);
  const payload = Buffer.from(envelope.payload, "base64");
  if (payload.toString("base64") !== envelope.payload) throw new AttestationError("envelope_malformed", "The envelope's payload is not canonical base64.");
  // What DSSE leaves unsigned is held to one form, so that a changed byte anywhere in the envelope
  // fails: each signature's base64 is canonical (a decoder would skip a changed padding byte), and
  // the signature that verifies names the key it verifies with.
  for (const s of envelope.signatures) {
    if (Buffer.from(s.sig, "base64").toString("base64") !== s.sig) throw new AttestationError("envelope_malformed", "A signature of the envelope is not canonical base64.");
  }
  const named = envelope.signatures.filter((s) => s.keyid === keyid);
  if (named.length === 0) {
    throw new AttestationError("keyid_mismatch", `The envelope's signatures name key ${envelope.signatures.map((s) => s.keyid || "(none)").join(", ")}, not the key given (${keyid}).`);
  }
  const pae = dsse.preAuthEncoding(envelope.payloadType, payload);
  const good = named.find((s) => sigstoreCrypto.verify(pae, key, Buffer.from(s.sig, "base64")));
  if (!good) throw new AttestationError("signature_invalid", `No signature verifies with key ${keyid}: the envelope was changed, or another key signed it.`);
  const statement = parseStatement<P>(payload, o.predicateType);
  for (const [name, bytes] of o.artifacts ?? []) {
    const subject = statement.subject.find((s) => s.name === name);
    if (!subject) throw new AttestationError("subject_missing", `The attestation names no artifact ${name}.`);
    const actual = sha256Hex(bytes);
    if (subject.digest.sha256 !== actual) {
      throw new AttestationError("subject_digest_mismatch", `Artifact ${name} has SHA-256 ${actual}; the attestation says ${subject.digest.sha256}.`);
    }
  }
  return { statement, keyid };
}

function publicKey(pem: string): KeyObject {
  let key: KeyObject;
  try {
    key = createPublicKey(pem);
  } catch (err) {
    throw new AttestationError("key_malformed", `The public key is not a PEM key: ${(err as Error).message}`);
  }
  if (key.asymmetricKeyType !== "ed25519") throw new AttestationError("key_malformed", `The public key is ${key.asymmetricKeyType}, not Ed25519.`);
  return key;
}

function parseEnvelope(text: string): Envelope {
  let e: unknown;
  try {
    e = JSON.parse(text);
  } catch {
    throw new AttestationError("envelope_malformed", "The attestation is not JSON.");
  }
  const x = e as Partial<Envelope>;
  const sigsOk = Array.isArray(x.signatures) && x.signatures.every((s) => typeof s?.sig === "string" && typeof s?.keyid === "string");
  if (typeof x.payload !== "string" || typeof x.payloadType !== "string" || !sigsOk) {
    throw new AttestationError("envelope_malformed", "The attestation is not a DSSE envelope (payloadType, payload, signatures[].sig).");
  }
  if (x.signatures!.length === 0) throw new AttestationError("signature_missing", "The envelope carries no signature.");
  if (x.payloadType !== IN_TOTO_PAYLOAD_TYPE) throw new AttestationError("payload_type_unexpected", `The payload type is ${x.payloadType}, not ${IN_TOTO_PAYLOAD_TYPE}.`);
  return x as Envelope;
}

function parseStatement<P>(payload: Buffer, predicateType: string): Statement<P> {
  let s: Partial<Statement<P>>;
  try {
    s = JSON.parse(payload.toString("utf8"));
  } catch {
    throw new AttestationError("statement_malformed", "The signed payload is not JSON.");
  }
  const subjectsOk = Array.isArray(s.subject) && s.subject.every((x) => typeof x?.name === "string" && /^[0-9a-f]{64}$/.test(x?.digest?.sha256 ?? ""));
  if (s._type !== STATEMENT_TYPE || !subjectsOk || typeof s.predicate !== "object" || s.predicate === null) {
    throw new AttestationError("statement_malformed", `The signed payload is not an in-toto Statement v1 with subjects and a predicate.`);
  }
  if (s.predicateType !== predicateType) throw new AttestationError("predicate_type_unexpected", `The predicate type is ${s.predicateType}, not ${predicateType}.`);
  return s as Statement<P>;
}
