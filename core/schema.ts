import { closest, distance } from 'fastest-levenshtein';
import * as z from 'zod/mini';
import { config, globalRegistry } from 'zod/mini';
import en from 'zod/v4/locales/en.js';

/**
 * zod as gpu-fleet's schemas use it: the mini API (`import * as z from 'zod/mini'` in each module
 * with a schema: the same checks as zod's classic API, in a form a bundler cuts to what is used;
 * the classic API weighed 450 KiB in each Lambda bundle), with the English messages the classic
 * API gives by default. A module with a schema imports this one first, for that setting.
 */
config(en());

/**
 * A whole number from `min` to `max`, each way of missing it said in the words the job spec and the
 * deployment config share (`unit` follows each bound: " s", " GiB").
 */
export function wholeNumber(min: number, max: number, unit = '') {
  return z
    .number({ error: `must be a number from ${min} to ${max}${unit}` })
    .check(
      z.int({ error: `must be a whole number from ${min} to ${max}${unit}` }),
      z.gte(min, { error: `must be at least ${min}${unit}` }),
      z.lte(max, { error: `must be at most ${max}${unit}` }),
    );
}

/** A yes or no, as the job spec and the deployment config both ask it. */
export function trueOrFalse() {
  return z.boolean({ error: 'must be true or false' });
}

/** What zod keeps of a schema's definition, as both its APIs (classic and mini) lay it out. */
interface Def {
  type: string;
  innerType?: unknown;
  in?: unknown;
  options?: unknown[];
  shape?: Record<string, unknown>;
  element?: unknown;
  valueType?: unknown;
  values?: unknown[];
}

const defOf = (s: unknown): Def => (s as { _zod: { def: Def } })._zod.def;

/** The schemas a value meets through a schema's wrappers: a default, an optional, a pipe's input, a union's options. */
function unwrap(s: unknown): unknown[] {
  const def = defOf(s);
  if (['default', 'optional', 'nullable', 'prefault', 'readonly', 'catch'].includes(def.type) && def.innerType)
    return unwrap(def.innerType);
  if (def.type === 'pipe' && def.in) return unwrap(def.in);
  if (def.type === 'union' && def.options) return def.options.flatMap(unwrap);
  return [s];
}

/**
 * The fields an object of the schema has at `path` (array and record keys step into the element;
 * a union gives the fields of all its options). Read from zod's definitions, so it serves the
 * classic API (the deployment config) and the mini one (the job spec) alike.
 */
export function fieldsAt(schema: unknown, path: readonly PropertyKey[], input?: unknown): string[] {
  // Of a union's options, those whose literal fields (a discriminator such as gpu.kind) the input agrees with.
  const agreeing = (options: unknown[], value: unknown): unknown[] => {
    if (value === null || typeof value !== 'object') return options;
    const fits = options.filter((o) =>
      Object.entries(defOf(o).shape ?? {}).every(([k, f]) => {
        const def = defOf(f);
        return def.type !== 'literal' || !(k in value) || (def.values ?? []).includes((value as Record<string, unknown>)[k]);
      }),
    );
    return fits.length > 0 ? fits : options;
  };
  let here = unwrap(schema);
  let at = input;
  for (const key of path) {
    here = agreeing(here, at).flatMap((s) => {
      const def = defOf(s);
      if (def.type === 'array' && typeof key === 'number' && def.element) return unwrap(def.element);
      if (def.type === 'record' && def.valueType) return unwrap(def.valueType);
      if (def.type === 'object' && def.shape && typeof key === 'string' && key in def.shape) return unwrap(def.shape[key]);
      return [];
    });
    at = at !== null && typeof at === 'object' ? (at as Record<PropertyKey, unknown>)[key] : undefined;
  }
  return [...new Set(agreeing(here, at).flatMap((s) => Object.keys(defOf(s).type === 'object' ? (defOf(s).shape ?? {}) : {})))];
}

/**
 * ` (did you mean "maxSize"?)` when a known value is close to what was written (another case, or a
 * typo or two for its length), else nothing.
 */
export function didYouMean(value: string, known: readonly string[]): string {
  if (known.length === 0 || value === '') return '';
  const sameButCase = known.find((k) => k.toLowerCase() === value.toLowerCase());
  const best = sameButCase ?? closest(value, [...known]);
  // Another case, a typo or two for its length, or a unit left off or added ("interval" for "intervalSec").
  const unit = value.length >= 4 && (best.startsWith(value) || value.startsWith(best));
  const near = sameButCase !== undefined || unit || distance(value, best) <= Math.max(1, Math.floor(value.length / 6));
  return best && best !== value && near ? ` (did you mean ${JSON.stringify(best)}?)` : '';
}

/** "unknown field "x" (did you mean "y"?); allowed: a, b": the message for keys a strict object does not have. */
export function unknownFieldsMessage(keys: readonly string[], allowed: readonly string[]): string {
  const each = keys.map((k) => `${JSON.stringify(k)}${didYouMean(k, allowed)}`);
  return `unknown field${keys.length > 1 ? 's' : ''} ${each.join(', ')}${allowed.length > 0 ? `; allowed: ${allowed.join(', ')}` : ''}`;
}

/**
 * Gives fields of a schema their one-line descriptions (zod's global registry, which JSON Schema
 * output and so docs/reference read), by path: `"nodeGroups[].maxSize"`; `[]` steps into a list's
 * entries or a map's values, and a union's options each get it. A path the schema does not have
 * throws, so a description cannot outlive its field.
 */
export function describeFields(schema: unknown, descriptions: Readonly<Record<string, string>>): void {
  for (const [path, description] of Object.entries(descriptions)) {
    let here: unknown[] = [schema];
    for (const part of path.split('.')) {
      const [, name, lists] = /^([^[]+)((?:\[\])*)$/.exec(part) ?? [];
      here = here.flatMap(unwrap).flatMap((s) => {
        const field = name !== undefined ? defOf(s).shape?.[name] : undefined;
        return field ? [field] : [];
      });
      for (let i = 0; i < (lists ?? '').length / 2; i++)
        here = here.flatMap(unwrap).flatMap((s) => {
          const d = defOf(s);
          return d.type === 'array' && d.element ? [d.element] : d.type === 'record' && d.valueType ? [d.valueType] : [];
        });
    }
    if (here.length === 0) throw new Error(`describeFields: the schema has no field ${path}`);
    for (const s of here) globalRegistry.add(s as Parameters<typeof globalRegistry.add>[0], { description });
  }
}
