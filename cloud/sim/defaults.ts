import { BUDGET_TAGS } from '../../core/budget.ts';
import type { Cloud } from '../../core/catalog.ts';
import type { GpuModel, RightsizeMode } from '../../core/gpu.ts';
import type { TeamTagSet } from '../../core/ports.ts';
import type { SimGroupConfig, SimReservationConfig } from './sim-cloud.ts';
import type { SpotSetup } from './simulation.ts';
import { loadAvailabilityTrace, type AvailabilityTrace } from './spot-market.ts';
import { fnv1a, type Workload } from './workload.ts';
import { alibabaAppDemand, azureLlmDemand, type SimService } from './service-demand.ts';
import type { ReplicaStartup } from './replica-start.ts';

/** The trace `npm start` replays (see data/PROVENANCE.md). */
export const BUILT_IN_TRACE = new URL('../../data/traces/philly-6214e9-48h.csv', import.meta.url);

/** Traces shipped in data/traces, by short name for `--trace NAME`. */
export const SHIPPED_TRACES: Readonly<Record<string, URL>> = {
  philly: BUILT_IN_TRACE,
  'philly-6214e9-48h': BUILT_IN_TRACE,
};

/**
 * The simulated fleet for the built-in workload: V100 machines (p3 family) in the two us-west-2
 * zones whose spot availability traces ship with the project, one group per instance type and
 * capacity type, as a platform team would configure Auto Scaling groups.
 */
export const DEFAULT_SIM_GROUPS: readonly SimGroupConfig[] = [
  { id: 'p3-2xl-spot', instanceTypes: ['p3.2xlarge'], zones: ['us-west-2a', 'us-west-2b'], capacityType: 'spot', minSize: 0, maxSize: 400 },
  {
    id: 'p3-2xl-od',
    instanceTypes: ['p3.2xlarge'],
    zones: ['us-west-2a', 'us-west-2b'],
    capacityType: 'on-demand',
    minSize: 0,
    maxSize: 400,
    // Four machines prepared ahead for the services' on-demand fallback (and any 1-GPU on-demand work): in service in
    // 60 s instead of 180 s, for their volumes while they wait (about $2 a day). Four, not two: a spot take-back
    // warns three to five chat replicas at once (seed 1: two gave chat 99.21% of requests in objective, four 99.44%).
    warmPool: { size: 4, state: 'Stopped' },
  },
  { id: 'p3-8xl-spot', instanceTypes: ['p3.8xlarge'], zones: ['us-west-2a', 'us-west-2b'], capacityType: 'spot', minSize: 0, maxSize: 100 },
  {
    id: 'p3-8xl-od',
    instanceTypes: ['p3.8xlarge'],
    zones: ['us-west-2a', 'us-west-2b'],
    capacityType: 'on-demand',
    minSize: 0,
    maxSize: 100,
  },
  {
    id: 'p3-16xl-spot',
    instanceTypes: ['p3.16xlarge'],
    zones: ['us-west-2a', 'us-west-2b'],
    capacityType: 'spot',
    minSize: 0,
    maxSize: 60,
  },
  {
    id: 'p3-16xl-od',
    instanceTypes: ['p3.16xlarge'],
    zones: ['us-west-2a', 'us-west-2b'],
    capacityType: 'on-demand',
    minSize: 0,
    maxSize: 60,
  },
];

const traceCache = new Map<string, AvailabilityTrace>();
function shippedAvailability(name: string, folder = 'availability'): AvailabilityTrace {
  let t = traceCache.get(name);
  if (!t) {
    t = loadAvailabilityTrace(new URL(`../../data/spot/${folder}/${name}.json`, import.meta.url));
    traceCache.set(name, t);
  }
  return t;
}

/** GCP zones whose spot availability ships (SkyServe's GCP1 trace, data/spot/spothedge-gcp1). */
export const GCP_TRACE_ZONES: readonly string[] = [
  'us-central1-a',
  'us-central1-b',
  'us-west1-b',
  'us-east1-b',
  'europe-west4-a',
  'asia-northeast1-a',
];

const GCP_SIZES = [1, 2, 4, 8] as const;
/** GCP zones of the two-cloud fleet: spot in three US zones (available 86%, 96% and 48% of the trace's ticks), on-demand in one. */
const GCP_SPOT_ZONES = ['us-central1-a', 'us-central1-b', 'us-west1-b'] as const;
const GCP_ON_DEMAND_ZONE = 'us-central1-a';

/**
 * The simulated GCP fleet beside the AWS one (`simulate --clouds aws,gcp`): A100 machines
 * (a2-highgpu-1g … 8g), one zonal managed instance group per machine type, zone and provisioning
 * model, as gpu-fleet's GCP groups are set up (docs: one MIG per type and zone). Prices come
 * from the shipped GCP catalogue.
 */
export const GCP_SIM_GROUPS: readonly SimGroupConfig[] = [
  ...GCP_SIZES.flatMap((n) =>
    GCP_SPOT_ZONES.map<SimGroupConfig>((zone) => ({
      id: `a2-${n}g-spot-${zone}`,
      cloud: 'gcp',
      instanceTypes: [`a2-highgpu-${n}g`],
      zones: [zone],
      capacityType: 'spot',
      minSize: 0,
      maxSize: n === 8 ? 20 : 60,
    })),
  ),
  ...GCP_SIZES.map<SimGroupConfig>((n) => ({
    id: `a2-${n}g-od-${GCP_ON_DEMAND_ZONE}`,
    cloud: 'gcp',
    instanceTypes: [`a2-highgpu-${n}g`],
    zones: [GCP_ON_DEMAND_ZONE],
    capacityType: 'on-demand',
    minSize: 0,
    maxSize: n === 8 ? 20 : 60,
  })),
];

/** The simulated groups of the chosen clouds: AWS's built-in fleet, GCP's, or both. */
export function simGroupsFor(clouds: readonly Cloud[]): readonly SimGroupConfig[] {
  return [...(clouds.includes('aws') ? DEFAULT_SIM_GROUPS : []), ...(clouds.includes('gcp') ? GCP_SIM_GROUPS : [])];
}

/**
 * The replayed jobs as a fleet over two clouds sees them. The Philly trace's jobs ask for V100s,
 * which only the AWS groups have; across two clouds, teams differ in what their jobs can use:
 * by a hash of the job id, 40% keep V100 only (AWS only), 20% need A100 (GCP only) and 40% take
 * either. Jobs that ask for no model, or for other models, are left as they are.
 */
export function acrossClouds(workload: Workload): Workload {
  return onV100Jobs(workload, (j) => {
    const u = fnv1a(`${j.id}/cloud`) % 10;
    return u < 4 ? ['V100'] : u < 6 ? ['A100-40GB'] : ['V100', 'A100-40GB'];
  });
}

/** The workload with the models of each job that asks for V100s alone replaced by `models(job)` (other jobs as they are). */
function onV100Jobs(workload: Workload, models: (job: Workload['jobs'][number]) => GpuModel[]): Workload {
  return {
    ...workload,
    jobs: workload.jobs.map((j) => {
      const g = j.spec.gpu;
      if (g.kind === 'mig' || !g.models || g.models.length !== 1 || g.models[0] !== 'V100') return j;
      return { ...j, spec: { ...j.spec, gpu: { ...g, models: models(j) } } };
    }),
  };
}

/** The replayed jobs with every V100 request turned into a request for these models (a fleet without V100s). */
export function onModels(workload: Workload, models: readonly GpuModel[]): Workload {
  return onV100Jobs(workload, () => [...models]);
}

/**
 * The spot market of the built-in fleet: SkyPilot's measured availability of one V100 spot
 * machine (p3.2xlarge, `v100_1`) and of an 8-V100 machine (p3.16xlarge, `v100_8`) in us-west-2a
 * and us-west-2b, Oct–Nov 2022. p3.8xlarge (4 V100) follows the 8-GPU trace of its zone.
 */
export const BUILT_IN_SPOT: SpotSetup = {
  kind: 'traces',
  traceOf: ({ zone, instanceType }) => {
    // GCP: SkyServe's measured availability of A100 ×8 spot machines in each zone; every a2-highgpu size of the zone follows it.
    if (instanceType.startsWith('a2-highgpu-'))
      return GCP_TRACE_ZONES.includes(zone) ? shippedAvailability(`${zone}_a100_40gb_8`, 'spothedge-gcp1') : undefined;
    if (zone !== 'us-west-2a' && zone !== 'us-west-2b') return undefined;
    if (instanceType === 'p3.2xlarge') return shippedAvailability(`${zone}_v100_1`);
    if (instanceType === 'p3.8xlarge' || instanceType === 'p3.16xlarge') return shippedAvailability(`${zone}_v100_8`);
    return undefined;
  },
};

/** Budget tags for the teams of the built-in workload: monthly budgets that alert at 25/50/80/100%. */
export function defaultTeamTags(teams: readonly string[], budgetUsd: number | ((team: string) => number) = 2_500): TeamTagSet[] {
  return teams.map((team) => ({
    team,
    resource: `sim:queue/${team}`,
    tags: {
      [BUDGET_TAGS.team]: team,
      [BUDGET_TAGS.amount]: String(typeof budgetUsd === 'number' ? budgetUsd : budgetUsd(team)),
      [BUDGET_TAGS.period]: 'monthly',
      [BUDGET_TAGS.action]: 'alert',
      [BUDGET_TAGS.alertAt]: '25/50/80/100',
      [BUDGET_TAGS.weight]: '1',
    },
  }));
}

/** The request trace and the app trace `npm start`'s services follow (see data/PROVENANCE.md). */
export const BUILT_IN_CHAT_TRACE = new URL('../../data/serving/AzureLLMInferenceTrace_conv.csv', import.meta.url);
export const BUILT_IN_APP_TRACE = new URL('../../data/traces/alibaba-dlrm2025-sample.csv', import.meta.url);

/**
 * Requests per second one V100 replica is scaled to hold for the chat service: Vidur (MLSys'24)
 * serves the Azure conv trace with Llama-3-8B at 6.45 requests per second on one A100-80GB;
 * decoding is bound by memory bandwidth, and a V100's (900 GB/s) is 0.44 of an A100-80GB's
 * (2,039 GB/s), so about 2.8 per second; the target holds 70% of that.
 */
export const CHAT_RPS_PER_V100 = 2;

/**
 * The chat service's latency objective: a request waits at most 2 s for a batch slot (its time
 * to first token is that plus the prefill). A replica serves 2.8 requests per second at full load
 * (above); 32 at once is an assumption that fits the memory: Llama-3-8B's KV cache takes 128 KiB
 * per token (32 layers × 8 KV heads × 128 × 2 × 2 bytes), and a 16 GB V100 holding the model's
 * weights in 8 bits (8 GB) has about 7 GB left, some 57k tokens, about 45 of the trace's
 * conversations (some 1,000 prompt and 250 output tokens each; vLLM's own cap, max_num_seqs, is
 * 256).
 */
export const CHAT_OBJECTIVE = { waitSec: 2, replicaRps: 2.8, concurrency: 32 } as const;

/**
 * The recommendation service's load per live instance of Alibaba's app_0, its replica's throughput
 * and its objective. The trace gives instances, not requests: 50 requests per second per instance,
 * a replica serving 70 at full load in batches of 8 (114 ms a batch) and a 200 ms wait are
 * assumptions, chosen so the scaling target (one instance's load a replica) holds 71% of a replica,
 * as the chat target does.
 */
export const RECOMMEND_RPS_PER_INSTANCE = 50;

/**
 * What a chat replica loads when it starts: the vLLM OpenAI image, about 5 GB compressed on Docker
 * Hub in 2024 (vllm-project/vllm issue 7609; v0.6.3 is of October 2024); Llama-3-8B's weights in
 * 8 bits, 8.03 billion parameters of a byte each, 7.5 GiB; and 30 s of engine warm-up (its memory
 * profiling run and CUDA graph capture; an assumption).
 */
export const CHAT_STARTUP: ReplicaStartup = {
  imageGiB: 5,
  weightsGiB: 7.5,
  warmupSec: 30,
  source: 'vLLM image ~5 GB (vllm issue 7609); Llama-3-8B at 8 bits 7.5 GiB; warm-up 30 s assumed',
};

/** What a recommendation replica loads: a 2 GiB image, 4 GiB of embedding tables and 10 s of warm-up (all assumptions). */
export const RECOMMEND_STARTUP: ReplicaStartup = {
  imageGiB: 2,
  weightsGiB: 4,
  warmupSec: 10,
  source: 'assumed: 2 GiB image, 4 GiB of embedding tables, 10 s warm-up',
};
export const RECOMMEND_OBJECTIVE = { waitSec: 0.2, replicaRps: 70, concurrency: 8 } as const;

/**
 * The services `npm start` replays beside the jobs (`--no-services` leaves them out): a chat
 * service on the Azure LLM conversation trace's requests, and a recommendation service following
 * the live inference instances of Alibaba's app_0 (one replica per instance). Both scale on
 * requests per second per replica, on spot where gpu-fleet judges it safe, and each has a latency
 * objective (above) that the simulation counts requests against.
 */
export function defaultSimServices(gpuModel: GpuModel = 'V100'): SimService[] {
  const spec = (
    name: string,
    perReplica: number,
    objective: { readonly waitSec: number; readonly replicaRps: number; readonly concurrency: number },
    max: number,
    image: string,
    command: string[],
  ) => ({
    name,
    image,
    command,
    gpu: { kind: 'whole' as const, count: 1, models: [gpuModel] },
    service: {
      port: 8000,
      // Asked from 30 s on, every 10 s: the replica answers once it has loaded (startup below), not at a fixed delay.
      readiness: { path: '/health', initialDelaySec: 30, periodSec: 10 },
      replicas: { min: 1, max },
      targets: [{ metric: 'requests-per-second' as const, perReplica }],
      scaleDownWindowSec: 600,
      objective: { ...objective },
    },
  });
  return [
    {
      team: 'nlp',
      spec: spec('chat', CHAT_RPS_PER_V100, CHAT_OBJECTIVE, 8, 'vllm/vllm-openai:v0.6.3', [
        '--model',
        'meta-llama/Meta-Llama-3-8B-Instruct',
        '--port',
        '8000',
      ]),
      demand: azureLlmDemand(BUILT_IN_CHAT_TRACE),
      startup: CHAT_STARTUP,
    },
    {
      team: 'recsys',
      spec: spec('recommend', RECOMMEND_RPS_PER_INSTANCE, RECOMMEND_OBJECTIVE, 12, 'registry.example.com/recsys/dlrm-serve:2025.1', [
        'serve',
        '--port',
        '8000',
      ]),
      demand: alibabaAppDemand(BUILT_IN_APP_TRACE, 'app_0', RECOMMEND_RPS_PER_INSTANCE),
      startup: RECOMMEND_STARTUP,
    },
  ];
}

/**
 * The reservation scenario of `bench:replay --reservations`, beside the built-in fleet: an On-Demand
 * Capacity Reservation of four p3.8xlarge in us-west-2a for the whole run, billed at on-demand
 * ($12.24/h each, the shipped catalogue's price: how EC2 bills an ODCR), and a Capacity Block of two
 * p3.16xlarge in us-west-2b delivered 4 h into the run for 12 h (its machines go at 15 h 30 min),
 * priced at half the type's on-demand price. That price is an assumption: no Capacity Block price is
 * in the shared data (AWS quotes them per offering at purchase), and real blocks are sold for p4d,
 * p5 and newer, not the trace's V100s; the scenario is about the rules, not the family.
 */
export function reservationScenario(startMs: number): { reservations: SimReservationConfig[]; groups: SimGroupConfig[] } {
  const H = 3_600_000;
  const reservations: SimReservationConfig[] = [
    {
      id: 'cr-0a0d0c0000000a001',
      zone: 'us-west-2a',
      instanceType: 'p3.8xlarge',
      kind: 'odcr',
      count: 4,
      priceMicroUsdPerHour: 12_240_000,
    },
    {
      id: 'cr-0b10c0000000b0001',
      zone: 'us-west-2b',
      instanceType: 'p3.16xlarge',
      kind: 'capacity-block',
      count: 2,
      startMs: startMs + 4 * H,
      endMs: startMs + 16 * H,
      priceMicroUsdPerHour: 12_240_000,
    },
  ];
  const groups: SimGroupConfig[] = [
    ...DEFAULT_SIM_GROUPS,
    {
      id: 'p3-8xl-odcr',
      instanceTypes: ['p3.8xlarge'],
      zones: ['us-west-2a'],
      capacityType: 'reserved',
      reservationId: reservations[0]!.id,
      minSize: 0,
      maxSize: 4,
    },
    {
      id: 'p3-16xl-block',
      instanceTypes: ['p3.16xlarge'],
      zones: ['us-west-2b'],
      capacityType: 'reserved',
      reservationId: reservations[1]!.id,
      minSize: 0,
      maxSize: 2,
    },
  ];
  return { reservations, groups };
}

/** How the right-sizing scenario's oversized families really use their GPU, and how the others do. */
export interface RightsizingScenarioOptions {
  /** Share of the job families that ask for a whole A100 and use a few GiB at a tenth of its compute (0–1). */
  readonly oversizedShare: number;
  /** What their specs let right-sizing do (`suggest` is the baseline: the same jobs, their own shapes). */
  readonly mode: RightsizeMode;
  /** Job families the one-GPU jobs fall into (default 16). */
  readonly families?: number;
  /** Spot groups of the same machines beside the on-demand ones (for `bench:chaos --rightsizing`: interruptions of right-sized jobs). */
  readonly spot?: boolean;
}

/**
 * The right-sizing scenario (`bench:replay -- --rightsizing`): a trace's jobs on A100 40GB machines
 * (p4d.24xlarge on demand: one group of whole GPUs, one in MIG mode), its one-GPU jobs grouped into
 * recurring families (a `project` label and an image, by a hash of the job id), and a share of the
 * families oversized: they ask for a whole A100 and use 3–7 GiB of its 40 GiB at 5–11% of its
 * compute. The others, and every multi-GPU job, fill what they ask for (24–36 GiB, 60–90%).
 *
 * What each process uses is scripted, by family (no public trace records per-job GPU memory and
 * utilisation); the agents only see readings of it (cloud/sim/sim-agent.ts: memory at the peak every
 * fourth look, utilisation ±30% around the mean). A process given less memory than its peak fails,
 * and one given less compute runs slower, so an `auto` shape that is too small shows as failed jobs
 * (the invariants count them against the platform) and as a slowdown.
 */
export function rightsizingScenario(
  workload: Workload,
  options: RightsizingScenarioOptions,
): { workload: Workload; groups: readonly SimGroupConfig[] } {
  const families = options.families ?? 16;
  const oversized = Math.round(options.oversizedShare * families);
  const A100 = 312; // GPU_SPEED['A100-40GB'].tflops
  const jobs = workload.jobs.map((j) => {
    const g = j.spec.gpu;
    const count = g.kind === 'whole' ? g.count : 1;
    if (count > 1) {
      const f = fnv1a(`${j.id}/family`) % families;
      return {
        ...j,
        spec: { ...j.spec, gpu: { kind: 'whole' as const, count, models: ['A100-40GB'] } },
        gpuUse: { peakMemoryMiB: (24 + (f % 4) * 4) * 1024, tflops: A100 * (0.6 + 0.1 * (f % 4)) },
      };
    }
    const f = fnv1a(`${j.id}/family`) % families;
    const small = f < oversized;
    return {
      ...j,
      spec: {
        ...j.spec,
        image: `registry.example/acme/job-${f}:1`,
        labels: { ...j.spec.labels, project: `family-${f}` },
        gpu: { kind: 'whole' as const, count: 1, models: ['A100-40GB'], rightsize: options.mode },
      },
      gpuUse: small
        ? { peakMemoryMiB: (3 + (f % 5)) * 1024, tflops: A100 * (0.05 + 0.02 * (f % 4)) }
        : { peakMemoryMiB: (24 + (f % 4) * 4) * 1024, tflops: A100 * (0.6 + 0.1 * (f % 4)) },
    };
  });
  const zones = ['us-east-1a', 'us-east-1b']; // the shipped catalogue prices p4d.24xlarge on demand in us-east-1
  const groups: SimGroupConfig[] = [
    { id: 'p4d-od', instanceTypes: ['p4d.24xlarge'], zones, capacityType: 'on-demand', minSize: 0, maxSize: 60 },
    { id: 'p4d-mig-od', instanceTypes: ['p4d.24xlarge'], zones, capacityType: 'on-demand', minSize: 0, maxSize: 30, migEnabled: true },
    ...(options.spot
      ? [
          { id: 'p4d-spot', instanceTypes: ['p4d.24xlarge'], zones, capacityType: 'spot' as const, minSize: 0, maxSize: 60 },
          {
            id: 'p4d-mig-spot',
            instanceTypes: ['p4d.24xlarge'],
            zones,
            capacityType: 'spot' as const,
            minSize: 0,
            maxSize: 30,
            migEnabled: true,
          },
        ]
      : []),
  ];
  return { workload: { ...workload, name: `${workload.name}+families`, jobs }, groups };
}
