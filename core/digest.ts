/**
 * A digest of a text for telling two texts apart where keeping them whole is too large: two
 * 53-bit cyrb53 hashes with different seeds and the length, in base 36. Not a cryptographic hash
 * (core computes no I/O and loads no node module): it tells a retry from another submission, and
 * is never a secret's stand-in (it is taken of text whose secrets are already redacted).
 */
export function textDigest(text: string): string {
  return `${cyrb53(text, 0).toString(36)}-${cyrb53(text, 0x9e3779b9).toString(36)}-${text.length.toString(36)}`;
}

/** cyrb53 (public domain, bryc): a fast 53-bit string hash with good spread. */
export function cyrb53(s: string, seed: number): number {
  let h1 = 0xdeadbeef ^ seed;
  let h2 = 0x41c6ce57 ^ seed;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    h1 = Math.imul(h1 ^ c, 2654435761);
    h2 = Math.imul(h2 ^ c, 1597334677);
  }
  h1 = Math.imul(h1 ^ (h1 >>> 16), 2246822507) ^ Math.imul(h2 ^ (h2 >>> 13), 3266489909);
  h2 = Math.imul(h2 ^ (h2 >>> 16), 2246822507) ^ Math.imul(h1 ^ (h1 >>> 13), 3266489909);
  return 4294967296 * (2097151 & h2) + (h1 >>> 0);
}
