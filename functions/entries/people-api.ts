// Lambda entry: the people API (a function URL with IAM auth, called by people under a team role or the admin role).
import * as z from 'zod/mini';
import { PeopleRolesSchema } from '../../cloud/aws/people-api-protocol.ts';
import { fleetPortsFromEnv, peoplePortsOf } from '../../cloud/wiring.ts';
import { ConfigError } from '../../core/errors.ts';
import { observability } from '../observability.ts';
import { createPeopleApiHandler } from '../people-api.ts';

/** A JSON variable the stack sets, checked: a mistake stops the function at its start, saying which variable and why. */
function jsonVar<T>(name: string, schema: z.ZodMiniType<T>, what: string): T {
  const raw = process.env[name];
  const problem = (why: string) =>
    new ConfigError('the environment', [`${name} ${why}: it holds ${what}`], { what: 'gpu-fleet environment' });
  if (!raw) throw problem('is not set');
  let json: unknown;
  try {
    json = JSON.parse(raw);
  } catch {
    throw problem('is not JSON');
  }
  const out = schema.safeParse(json);
  if (!out.success) throw problem(`is not valid (${out.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')})`);
  return out.data;
}

const roles = jsonVar('GPU_FLEET_PEOPLE_ROLES', PeopleRolesSchema, 'the people roles: {"<role name>": "<team>" | "*"}');
const teams = jsonVar(
  'GPU_FLEET_PEOPLE_TEAMS',
  z.record(z.string(), z.strictObject({ setsOwnBudget: z.boolean() })),
  'the teams: {"<team>": {"setsOwnBudget": false}}',
);
const ports = await fleetPortsFromEnv();
const { bytes, bucketBytes, ...people } = peoplePortsOf(ports);
export const handler = createPeopleApiHandler({
  ports: people,
  stores: { jobs: ports.stores.jobs, ...(ports.services ? { services: ports.services } : {}) },
  providers: ports.reconcile.providers,
  roles,
  teams,
  policy: ports.config.policy,
  ...(bytes ? { bytes } : {}),
  ...(bucketBytes ? { bucketBytes } : {}),
  clock: ports.clock,
  obs: observability('gpu-fleet-people-api'),
});
