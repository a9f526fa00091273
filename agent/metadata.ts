import { GCE_PREEMPTION_NOTICE_MS } from '../cloud/gcp/preemptions.ts';
import { GpuFleetError, messageOf } from '../core/errors.ts';
import type { CapacityType, Cloud } from '../core/catalog.ts';

/**
 * Who this machine is, and what its cloud says is about to happen to it, from the instance
 * metadata servers: EC2's IMDSv2 (a session token first, then every read with it) and the GCE
 * metadata server (every read with `Metadata-Flavor: Google`). Base URLs are configurable so the
 * tests can stand in a local server; every request has a short timeout, so off-cloud the agent
 * learns within seconds that there is no metadata server instead of hanging.
 */

export const AWS_IMDS_URL = 'http://169.254.169.254';
export const GCE_METADATA_URL = 'http://metadata.google.internal';

export interface Identity {
  readonly cloud: Cloud;
  /** The id gpu-fleet knows the machine by: the EC2 instance id, or the GCE instance name. */
  readonly instanceId: string;
  readonly region: string;
  readonly zone: string;
  readonly instanceType: string;
  readonly capacityType?: CapacityType;
  /** The node group (Auto Scaling group, managed instance group) when the metadata says so. */
  readonly groupId?: string;
  readonly privateIp?: string;
}

/** What the cloud says will happen to this machine. */
export type LocalNotice =
  /** The machine will be stopped or terminated at `actionAtMs` (AWS spot instance-action, GCE preemption). */
  | { readonly kind: 'interruption'; readonly action: string; readonly actionAtMs: number; readonly source: string }
  /** The machine is at higher risk (AWS rebalance recommendation, GCE host maintenance that ends it). */
  | { readonly kind: 'rebalance'; readonly noticedAtMs: number; readonly source: string };

export interface MetadataClient {
  readonly cloud: Cloud;
  identity(): Promise<Identity>;
  /**
   * The Auto Scaling lifecycle state the machine is moving to (`InService`, `Warmed:Stopped`, …),
   * where the cloud says one; undefined elsewhere.
   */
  targetLifecycleState?(): Promise<string | undefined>;
  /** The current notices; [] when there are none. */
  notices(nowMs: number): Promise<LocalNotice[]>;
}

/** The instance metadata server is missing, silent, or says something the agent cannot read. */
export class MetadataError extends GpuFleetError {
  override name = 'MetadataError';
}

export interface MetadataOptions {
  readonly timeoutMs?: number;
  readonly fetch?: typeof fetch;
}

type Fetch = typeof fetch;

async function request(f: Fetch, url: string, init: RequestInit, timeoutMs: number): Promise<Response> {
  try {
    return await f(url, { ...init, signal: AbortSignal.timeout(timeoutMs), redirect: 'error' });
  } catch (error) {
    const e = error as Error & { cause?: { code?: string; message?: string } };
    const why =
      e.name === 'TimeoutError' || e.name === 'AbortError'
        ? `no answer within ${timeoutMs} ms`
        : (e.cause?.code ?? e.cause?.message ?? e.message);
    throw new MetadataError(`${init.method ?? 'GET'} ${url}: ${why}`);
  }
}

// ---- AWS (IMDSv2) -------------------------------------------------------------------------

const TOKEN_TTL_S = 21_600;

export class AwsImds implements MetadataClient {
  readonly cloud = 'aws' as const;
  private token: { value: string; untilMs: number } | undefined;
  private readonly f: Fetch;
  private readonly timeoutMs: number;

  constructor(
    private readonly baseUrl = AWS_IMDS_URL,
    options: MetadataOptions = {},
    /** The agent's clock for token expiry (the test's virtual one, or Date.now). */
    private readonly nowMs: () => number = () => Date.now(),
  ) {
    this.f = options.fetch ?? fetch;
    this.timeoutMs = options.timeoutMs ?? 2000;
  }

  private pendingToken: Promise<string> | undefined;

  /** The session token: one request for any number of reads at once, renewed a minute before it expires. */
  private sessionToken(): Promise<string> {
    const now = this.nowMs();
    if (this.token && now < this.token.untilMs) return Promise.resolve(this.token.value);
    this.pendingToken ??= (async () => {
      try {
        const res = await request(
          this.f,
          `${this.baseUrl}/latest/api/token`,
          { method: 'PUT', headers: { 'X-aws-ec2-metadata-token-ttl-seconds': String(TOKEN_TTL_S) } },
          this.timeoutMs,
        );
        if (!res.ok)
          throw new MetadataError(`PUT ${this.baseUrl}/latest/api/token: HTTP ${res.status} (is IMDSv2 reachable from here? hop limit?)`);
        const value = (await res.text()).trim();
        this.token = { value, untilMs: now + (TOKEN_TTL_S - 60) * 1000 };
        return value;
      } finally {
        this.pendingToken = undefined;
      }
    })();
    return this.pendingToken;
  }

  /** A metadata value, or undefined when the path does not exist (HTTP 404). */
  async get(path: string): Promise<string | undefined> {
    for (let attempt = 0; attempt < 2; attempt++) {
      const token = await this.sessionToken();
      const res = await request(
        this.f,
        `${this.baseUrl}/latest/${path}`,
        { headers: { 'X-aws-ec2-metadata-token': token } },
        this.timeoutMs,
      );
      if (res.status === 404) {
        await res.body?.cancel();
        return undefined;
      }
      if (res.status === 401 && attempt === 0) {
        await res.body?.cancel();
        this.token = undefined; // the token expired or the server restarted: take a new one once
        continue;
      }
      if (!res.ok) {
        await res.body?.cancel();
        throw new MetadataError(`GET ${this.baseUrl}/latest/${path}: HTTP ${res.status}`);
      }
      return (await res.text()).trim();
    }
    throw new MetadataError(`GET ${this.baseUrl}/latest/${path}: refused a fresh token`);
  }

  async identity(): Promise<Identity> {
    const [instanceId, zone, region, instanceType, lifecycle, privateIp, group] = await Promise.all([
      this.get('meta-data/instance-id'),
      this.get('meta-data/placement/availability-zone'),
      this.get('meta-data/placement/region'),
      this.get('meta-data/instance-type'),
      this.get('meta-data/instance-life-cycle'),
      this.get('meta-data/local-ipv4'),
      // Present when the launch template allows instance tags in metadata (gpu-fleet's does).
      this.get('meta-data/tags/instance/aws:autoscaling:groupName'),
    ]);
    if (!instanceId || !zone || !instanceType)
      throw new MetadataError(`IMDS at ${this.baseUrl} did not give the instance id, zone and type`);
    return {
      cloud: 'aws',
      instanceId,
      zone,
      region: region ?? zone.replace(/[a-z]$/, ''),
      instanceType,
      ...(lifecycle === 'spot'
        ? { capacityType: 'spot' as const }
        : lifecycle === 'on-demand'
          ? { capacityType: 'on-demand' as const }
          : {}),
      ...(group ? { groupId: group } : {}),
      ...(privateIp ? { privateIp } : {}),
    };
  }

  /** IMDS's `autoscaling/target-lifecycle-state`: 404 (not in an Auto Scaling group) reads as undefined. */
  async targetLifecycleState(): Promise<string | undefined> {
    return this.get('meta-data/autoscaling/target-lifecycle-state');
  }

  async notices(nowMs: number): Promise<LocalNotice[]> {
    const out: LocalNotice[] = [];
    const action = await this.get('meta-data/spot/instance-action');
    if (action !== undefined) {
      const parsed = parseJson(action) as { action?: unknown; time?: unknown } | undefined;
      const atMs = typeof parsed?.time === 'string' ? Date.parse(parsed.time) : Number.NaN;
      if (typeof parsed?.action === 'string' && Number.isFinite(atMs))
        out.push({ kind: 'interruption', action: parsed.action, actionAtMs: atMs, source: 'spot/instance-action' });
      else throw new MetadataError(`spot/instance-action is not {"action", "time"}: ${JSON.stringify(action.slice(0, 120))}`);
    }
    const rebalance = await this.get('meta-data/events/recommendations/rebalance');
    if (rebalance !== undefined) {
      const parsed = parseJson(rebalance) as { noticeTime?: unknown } | undefined;
      const atMs = typeof parsed?.noticeTime === 'string' ? Date.parse(parsed.noticeTime) : Number.NaN;
      out.push({ kind: 'rebalance', noticedAtMs: Number.isFinite(atMs) ? atMs : nowMs, source: 'events/recommendations/rebalance' });
    }
    return out;
  }
}

// ---- GCE ----------------------------------------------------------------------------------

export class GceMetadata implements MetadataClient {
  readonly cloud = 'gcp' as const;
  private readonly f: Fetch;
  private readonly timeoutMs: number;

  constructor(
    private readonly baseUrl = GCE_METADATA_URL,
    options: MetadataOptions = {},
  ) {
    this.f = options.fetch ?? fetch;
    this.timeoutMs = options.timeoutMs ?? 2000;
  }

  async get(path: string): Promise<string | undefined> {
    const res = await request(
      this.f,
      `${this.baseUrl}/computeMetadata/v1/${path}`,
      { headers: { 'Metadata-Flavor': 'Google' } },
      this.timeoutMs,
    );
    if (res.status === 404) {
      await res.body?.cancel();
      return undefined;
    }
    if (!res.ok) {
      await res.body?.cancel();
      throw new MetadataError(`GET ${this.baseUrl}/computeMetadata/v1/${path}: HTTP ${res.status}`);
    }
    if (res.headers.get('metadata-flavor') !== 'Google')
      throw new MetadataError(`${this.baseUrl} answered without Metadata-Flavor: Google; it is not a GCE metadata server`);
    return (await res.text()).trim();
  }

  private token?: { readonly audience: string; readonly value: string; readonly expiresAtMs: number };

  /**
   * This machine's instance identity token for `audience`, with the instance named in it
   * (`format=full`), as the agent API's unsigned URL takes it (cloud/gcp/identity-token.ts): kept
   * until five minutes before it expires (Google's last an hour), then asked for again.
   */
  async identityToken(audience: string, nowMs: number = Date.now()): Promise<string> {
    if (this.token && this.token.audience === audience && nowMs < this.token.expiresAtMs - 5 * 60_000) return this.token.value;
    const value = await this.get(`instance/service-accounts/default/identity?audience=${encodeURIComponent(audience)}&format=full`);
    if (!value)
      throw new MetadataError(`the GCE metadata server at ${this.baseUrl} gave no identity token: is a service account attached?`);
    const exp = (parseJson(Buffer.from(value.split('.')[1] ?? '', 'base64url').toString('utf8')) as { exp?: unknown } | undefined)?.exp;
    if (typeof exp !== 'number') throw new MetadataError('the identity token the GCE metadata server gave is not a JWT with an expiry');
    this.token = { audience, value, expiresAtMs: exp * 1000 };
    return value;
  }

  async identity(): Promise<Identity> {
    const [name, zonePath, machinePath, provisioning, preemptible, createdBy, ip] = await Promise.all([
      this.get('instance/name'),
      this.get('instance/zone'),
      this.get('instance/machine-type'),
      this.get('instance/scheduling/provisioning-model'),
      this.get('instance/scheduling/preemptible'),
      this.get('instance/attributes/created-by'),
      this.get('instance/network-interfaces/0/ip'),
    ]);
    if (!name || !zonePath || !machinePath)
      throw new MetadataError(`the GCE metadata server at ${this.baseUrl} did not give the instance name, zone and machine type`);
    const zone = zonePath.split('/').pop()!;
    const spot = provisioning === 'SPOT' || preemptible === 'TRUE';
    // created-by is the managed instance group: projects/N/zones/Z/instanceGroupManagers/NAME (or regions/R/…).
    const group = createdBy && /\/instanceGroupManagers\/([^/]+)$/.exec(createdBy)?.[1];
    return {
      cloud: 'gcp',
      instanceId: name,
      zone,
      region: zone.replace(/-[a-z]$/, ''),
      instanceType: machinePath.split('/').pop()!,
      capacityType: spot ? 'spot' : 'on-demand',
      ...(group ? { groupId: group } : {}),
      ...(ip ? { privateIp: ip } : {}),
    };
  }

  async notices(nowMs: number): Promise<LocalNotice[]> {
    const out: LocalNotice[] = [];
    const [preempted, maintenance] = await Promise.all([this.get('instance/preempted'), this.get('instance/maintenance-event')]);
    if (preempted === 'TRUE')
      out.push({ kind: 'interruption', action: 'preempted', actionAtMs: nowMs + GCE_PREEMPTION_NOTICE_MS, source: 'instance/preempted' });
    // GPU VMs cannot live-migrate: host maintenance ends them (with about an hour's notice).
    if (maintenance === 'TERMINATE_ON_HOST_MAINTENANCE')
      out.push({ kind: 'rebalance', noticedAtMs: nowMs, source: 'instance/maintenance-event' });
    return out;
  }
}

/**
 * Finds which cloud this machine is on by asking both metadata servers at once; AWS wins if both
 * answer. Rejects within about the timeout when neither does, naming what each said.
 */
export async function detectMetadata(
  options: MetadataOptions & { awsBaseUrl?: string; gceBaseUrl?: string; nowMs?: () => number } = {},
): Promise<{ client: MetadataClient; identity: Identity }> {
  const aws = new AwsImds(options.awsBaseUrl, options, options.nowMs);
  const gce = new GceMetadata(options.gceBaseUrl, options);
  const [a, g] = await Promise.allSettled([aws.identity(), gce.identity()]);
  if (a.status === 'fulfilled') return { client: aws, identity: a.value };
  if (g.status === 'fulfilled') return { client: gce, identity: g.value };
  throw new MetadataError(`no instance metadata server answered: AWS IMDS: ${messageOf(a.reason)}; GCE: ${messageOf(g.reason)}`);
}

/**
 * A machine launched into its group's warm pool boots once to be prepared, then is stopped (or
 * hibernated) until a scale-out starts it: until its target lifecycle state leaves `Warmed:*` it is
 * not the fleet's, so the agent waits here, registering nothing (reconcile would otherwise see a
 * node its group does not list, and lose it when the machine stops). Started from the pool, the
 * machine boots again, its state is `InService`, and the agent goes on. Returns the state it went on
 * with (undefined where the cloud says none).
 */
export async function waitOutWarmPool(
  metadata: MetadataClient,
  log: { info(message: string, extra?: Record<string, unknown>): void },
  sleep: (ms: number) => Promise<void> = (ms) => new Promise((r) => setTimeout(r, ms)),
  pollMs = 5_000,
): Promise<string | undefined> {
  let said = false;
  for (;;) {
    const state = await metadata.targetLifecycleState?.();
    if (!state?.startsWith('Warmed:')) return state;
    if (!said)
      log.info('in the group’s warm pool: not registering until the machine is started into service', { targetLifecycleState: state });
    said = true;
    await sleep(pollMs);
  }
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
