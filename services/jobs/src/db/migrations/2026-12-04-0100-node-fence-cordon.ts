import { sql, type Kysely, type Migration } from "kysely";

/**
 * Node administration by the instance operator: a cordon (no new reservations; reversible) and
 * a fence (for good). `nodes_fence_permanent` refuses any UPDATE that clears or moves a recorded
 * fence and any DELETE of a fenced node, whoever makes it, so a fenced node id can never
 * register again. Frozen.
 */
export const nodeFenceCordon: Migration = {
  async up(db: Kysely<any>) {
    await sql`ALTER TABLE nodes
      ADD COLUMN cordoned_at timestamptz,
      ADD COLUMN cordoned_by text,
      ADD COLUMN fenced_at timestamptz,
      ADD COLUMN fenced_by text,
      ADD COLUMN fence_reason text NOT NULL DEFAULT ''`.execute(db);
    await sql`CREATE FUNCTION nodes_fence_permanent() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN
        IF TG_OP = 'DELETE' THEN
          IF OLD.fenced_at IS NOT NULL THEN RAISE EXCEPTION 'node % is fenced for good', OLD.id USING ERRCODE = 'check_violation'; END IF;
          RETURN OLD;
        END IF;
        IF OLD.fenced_at IS NOT NULL AND (NEW.fenced_at IS DISTINCT FROM OLD.fenced_at OR NEW.fenced_by IS DISTINCT FROM OLD.fenced_by) THEN
          RAISE EXCEPTION 'node % is fenced for good', OLD.id USING ERRCODE = 'check_violation';
        END IF;
        RETURN NEW;
      END $$`.execute(db);
    await sql`CREATE TRIGGER nodes_fence_permanent BEFORE UPDATE OR DELETE ON nodes FOR EACH ROW EXECUTE FUNCTION nodes_fence_permanent()`.execute(db);
  },
};
