import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { reconcileCommand } from '../../cli/commands/reconcile.ts';
import { CloudError } from '../../core/errors.ts';
import type { NodeGroupProvider } from '../../core/ports.ts';
import { DEFAULT_POLICY } from '../../core/snapshot.ts';
import { nlpWorld, T0 } from '../builders.ts';

function capture() {
  let text = '';
  const stdout = new Writable({
    write(chunk, _enc, done) {
      text += String(chunk);
      done();
    },
  });
  return { stdout, text: () => text };
}

/** Two groups, one machine up in the first, nothing waiting: a dry run with no action to show. */
async function target() {
  const e = nlpWorld({
    groups: [
      { id: 'v100-spot', instanceTypes: ['p3.2xlarge'], zones: ['us-west-2a', 'us-west-2b'], capacityType: 'spot', minSize: 1, maxSize: 5 },
      {
        id: 'a100-mig-od',
        instanceTypes: ['p4d.24xlarge'],
        zones: ['us-east-1a'],
        capacityType: 'on-demand',
        minSize: 0,
        maxSize: 2,
        migEnabled: true,
      },
    ],
  });
  await e.cloud.setDesiredCapacity('v100-spot', 1);
  e.clock.advanceBy(120_000);
  e.cloud.tick();
  return {
    reconcile: e.ports,
    config: { policy: DEFAULT_POLICY },
    problems: () => ['GCP project ml-7: no credentials secret is configured'],
  };
}

describe('gpu-fleet reconcile --once --dry-run', () => {
  it('lists every group it discovered with its machines by state, even when the plan has no action', async () => {
    const t = await target();
    const out = capture();
    await reconcileCommand({ once: true, dryRun: true }, out, async () => t);
    const text = out.text();
    expect(text).toContain('actions (0, none applied):');
    expect(text).toContain('problem: GCP project ml-7: no credentials secret is configured');
    expect(text).toContain('groups (2):');
    expect(text).toContain('  aws a100-mig-od: on-demand MIG, p4d.24xlarge in us-east-1a; min 0, desired 0, max 2; machines: none');
    expect(text).toContain('  aws v100-spot: spot, p3.2xlarge in us-west-2a, us-west-2b; min 1, desired 1, max 5; machines: 1 running');
  });

  it('says the same in --json', async () => {
    const t = await target();
    const out = capture();
    await reconcileCommand({ once: true, dryRun: true, json: true }, out, async () => t);
    const j = JSON.parse(out.text());
    expect(j.discovered).toEqual([
      expect.objectContaining({ id: 'a100-mig-od', mig: true, machines: {}, min: 0, desired: 0, max: 2 }),
      expect.objectContaining({ id: 'v100-spot', capacityTypes: ['spot'], zones: ['us-west-2a', 'us-west-2b'], machines: { running: 1 } }),
    ]);
    expect(j.problems).toEqual(['GCP project ml-7: no credentials secret is configured']);
  });

  it('names each degraded provider, since when and its last error, in text and in --json', async () => {
    const t = await target();
    const fail = async (): Promise<never> => {
      throw new CloudError('unavailable', 'compute.googleapis.com: 503 Service Unavailable', { operation: 'list groups', cloud: 'gcp' });
    };
    const down: NodeGroupProvider = {
      cloud: 'gcp',
      scope: 'project ml-7',
      listGroups: fail,
      listInstances: fail,
      setDesiredCapacity: fail,
      terminateInstance: fail,
      setScaleInProtection: fail,
      describeInstance: fail,
      launchFailures: fail,
      completeLifecycleAction: fail,
    };
    const withGcp = { ...t, reconcile: { ...t.reconcile, providers: [...t.reconcile.providers, down] } };
    const out = capture();
    await reconcileCommand({ once: true, dryRun: true }, out, async () => withGcp);
    expect(out.text()).toContain(
      `degraded: gcp project ml-7 is left out (not scaled; work only it could run waits) since ${new Date(T0 + 120_000).toISOString()}; last error [unavailable]: compute.googleapis.com: 503 Service Unavailable`,
    );
    expect(out.text()).toContain('groups (2):');
    const json = capture();
    await reconcileCommand({ once: true, dryRun: true, json: true }, json, async () => withGcp);
    expect(JSON.parse(json.text()).degraded).toEqual([
      {
        cloud: 'gcp',
        scope: 'project ml-7',
        sinceMs: T0 + 120_000,
        error: 'compute.googleapis.com: 503 Service Unavailable',
        code: 'unavailable',
      },
    ]);
  });
});
