// fast-xml-parser's output, shared by the JUnit readers (node-tap.ts, python.ts); internal to
// the results parsers (not re-exported by index.ts).

/** One parsed XML element (its children by tag, its attributes as `@_name`). */
export type XmlNode = Record<string, unknown>;

/** An element's child (or children) as a list: fast-xml-parser gives a lone child as itself. */
export const xmlList = (v: unknown): XmlNode[] => (v === undefined ? [] : Array.isArray(v) ? (v as XmlNode[]) : [v as XmlNode]);
