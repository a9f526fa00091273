import { afterEach, describe, expect, it } from 'vitest';
import { fencedBySec } from '../../core/services/node-rules.ts';
import { DEFAULT_POLICY } from '../../core/snapshot.ts';
import { agentWorld, COUNTER_JOB, waitFor } from '../support/agent-world.ts';

// Issue 48: an agent cut off from the control plane stops its own work before the control plane
// could place it anywhere else, so no attempt runs on two machines whichever side was wrong.

const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

describe('node agent: the lease', () => {
  it('the default lease and fence end before reconcile requeues a silent machine, and after its patience', () => {
    // A heartbeat (15 s apart) may be in flight when the record was last written: the fence ends before, with that to spare.
    expect(fencedBySec() + 15).toBeLessThan(DEFAULT_POLICY.silentRequeueSec);
    expect(fencedBySec()).toBeGreaterThan(DEFAULT_POLICY.heartbeatTimeoutSec);
  });

  it('cut off from the control plane past its lease, it stops its job, starts nothing, and reports it requeued once heard again', async () => {
    const w = agentWorld();
    cleanups.push(() => w.shutdown());
    let up = true;
    const a = w.agent('i-a', {
      reachable: () => up,
      config: { heartbeatSec: 0.2, noticeSec: 0.2, lease: { leaseSec: 4, fenceGraceSec: 3 } },
    });
    await a.start();
    // Checkpoints every 5 steps (100 ms): some are saved before the control plane goes.
    await w.submit('nlp.cut', { command: ['node', COUNTER_JOB, '100000', '20', '5'], checkpoint: { intervalSec: 60, gracePeriodSec: 5 } });
    await w.place('nlp.cut', ['i-a']);
    const pid = await waitFor('the job to run', () => a.running()[0]?.pid);
    const before = await waitFor('a checkpoint saved', async () => (await w.jobs.get('nlp.cut'))?.checkpoint);

    up = false;
    // Another job placed meanwhile (the control plane's write landed before the cut): it must not start here.
    await w.submit('nlp.later', { command: ['node', COUNTER_JOB, '100000', '20'] });
    await w.place('nlp.later', ['i-a']);
    // Lease (4 s), then the fence (3 s) and the stop grace (2 s), with room for a slow machine.
    await waitFor('the fenced job to be stopped', () => !alive(pid), 30_000);
    expect(a.running().map((r) => r.jobId)).not.toContain('nlp.later');
    expect(w.logs).toContainEqual(
      expect.objectContaining({ level: 'error', message: expect.stringMatching(/no heartbeat for the whole lease/) }),
    );
    // Nothing reached the store while it was cut off: the record still says running there.
    expect(await w.jobs.get('nlp.cut')).toMatchObject({ state: 'running', attempt: 1 });

    up = true;
    const requeued = await waitFor('the stop to be reported', async () => {
      const j = await w.jobs.get('nlp.cut');
      return j?.state === 'pending' ? j : undefined;
    });
    expect(requeued).toMatchObject({ attempt: 2, requeueReason: { code: 'fenced' } });
    expect(requeued.checkpoint!.progressSec).toBeGreaterThanOrEqual(before.progressSec);
    expect(a.running().map((r) => r.jobId)).not.toContain('nlp.cut');
    // Heard again: the lease is renewed and work starts here again.
    await waitFor('the later job to start once the lease is renewed', () => a.running().some((r) => r.jobId === 'nlp.later'));
  }, 60_000);
});
