import { sql, type Kysely, type Migration } from "kysely";

/**
 * Per-node identity: each node id is bound to one Ed25519 public key. A key is `pending` from
 * the node's first registration until the instance operator approves its fingerprint
 * (`enrolled`), and `revoked` for good when the node is fenced. `node_credentials_permanent`
 * refuses any change to an enrolled key (other than its revocation), any change to a revoked
 * one and any DELETE of either, whoever makes it. `node_proofs_seen` holds the id of every node
 * proof accepted, until it expires, so that a proof is accepted once by all jobs replicas together.
 * Frozen.
 */
export const nodeCredentials: Migration = {
  async up(db: Kysely<any>) {
    await sql`CREATE TABLE node_credentials (
      node_id text PRIMARY KEY,
      public_key text NOT NULL,
      fingerprint text NOT NULL CHECK (fingerprint ~ '^[0-9a-f]{64}$'),
      state text NOT NULL CHECK (state IN ('pending', 'enrolled', 'revoked')),
      requested_at timestamptz NOT NULL DEFAULT now(),
      enrolled_at timestamptz,
      enrolled_by text,
      revoked_at timestamptz,
      CHECK ((state = 'pending') = (enrolled_at IS NULL)),
      CHECK ((state = 'revoked') = (revoked_at IS NOT NULL))
    )`.execute(db);
    await sql`CREATE INDEX node_credentials_fingerprint ON node_credentials (fingerprint)`.execute(db);
    await sql`CREATE FUNCTION node_credentials_permanent() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF TG_OP = 'DELETE' THEN
          IF OLD.state <> 'pending' THEN RAISE EXCEPTION 'the key of node % is % for good', OLD.node_id, OLD.state USING ERRCODE = 'check_violation'; END IF;
          RETURN OLD;
        END IF;
        IF OLD.state = 'revoked' THEN RAISE EXCEPTION 'the key of node % is revoked for good', OLD.node_id USING ERRCODE = 'check_violation'; END IF;
        IF OLD.state = 'enrolled' AND (NEW.state NOT IN ('enrolled', 'revoked') OR NEW.fingerprint IS DISTINCT FROM OLD.fingerprint OR NEW.public_key IS DISTINCT FROM OLD.public_key) THEN
          RAISE EXCEPTION 'the enrolled key of node % cannot change', OLD.node_id USING ERRCODE = 'check_violation';
        END IF;
        RETURN NEW;
      END $$`.execute(db);
    await sql`CREATE TRIGGER node_credentials_permanent BEFORE UPDATE OR DELETE ON node_credentials FOR EACH ROW EXECUTE FUNCTION node_credentials_permanent()`.execute(db);
    await sql`CREATE TABLE node_proofs_seen (
      jti text PRIMARY KEY CHECK (length(jti) <= 64),
      node_id text NOT NULL,
      expires_at timestamptz NOT NULL
    )`.execute(db);
    await sql`CREATE INDEX node_proofs_seen_expires ON node_proofs_seen (expires_at)`.execute(db);
  },
};
