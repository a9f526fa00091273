import { gcpShippedCatalog } from './gcp-shipped.ts';
import { awsShippedCatalog, mergeCatalogs, type ShippedCatalog } from './shipped.ts';

let cached: ShippedCatalog | undefined;

/** Every cloud's shipped catalogue as one: what the simulator and the benches price from. */
export function shippedCatalog(): ShippedCatalog {
  cached ??= mergeCatalogs(awsShippedCatalog(), gcpShippedCatalog());
  return cached;
}
