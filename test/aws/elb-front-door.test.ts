import { ElasticLoadBalancingV2Client } from '@aws-sdk/client-elastic-load-balancing-v2';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ElbFrontDoor } from '../../cloud/aws/elb-front-door.ts';
import { isCloudError } from '../../core/errors.ts';
import { frontDoorContract } from '../contract/front-door.contract.ts';
import { startFakeElb, type FakeElb } from '../support/fake-elb.ts';

const ARN = 'arn:aws:elasticloadbalancing:us-west-2:123456789012:targetgroup/gf-nlp-chat/50dc6c495c0c9188';
let elb: FakeElb;
beforeAll(async () => {
  elb = await startFakeElb([ARN]);
});
afterAll(async () => {
  await elb.close();
});

function door(): ElbFrontDoor {
  const client = new ElasticLoadBalancingV2Client({
    region: 'us-west-2',
    endpoint: elb.endpoint,
    credentials: { accessKeyId: 'x', secretAccessKey: 'x' },
    maxAttempts: 1,
  });
  return new ElbFrontDoor(client, { 'nlp.chat': ARN });
}

frontDoorContract('ELB v2 against a local Query-protocol server', async () => {
  elb.groups.get(ARN)!.clear();
  const answering = new Set<string>();
  elb.healthCheck = async (t) => answering.has(`${t.ip}:${t.port}`);
  return {
    door: door(),
    service: 'nlp.chat',
    settle: () => elb.settle(),
    answers: (t, ok) => void (ok ? answering.add(`${t.ip}:${t.port}`) : answering.delete(`${t.ip}:${t.port}`)),
  };
});

describe('the ELB front door', () => {
  it('sends the SDK’s Query calls with the target group and IP targets', async () => {
    elb.calls.length = 0;
    await door().register('nlp.chat', [{ ip: '10.0.3.9', port: 8000 }]);
    expect(elb.calls[0]).toMatchObject({
      action: 'RegisterTargets',
      params: { Version: '2015-12-01', TargetGroupArn: ARN, 'Targets.member.1.Id': '10.0.3.9', 'Targets.member.1.Port': '8000' },
    });
  });

  it('says which services it fronts, and names a missing target group, throttling and a deleted group in the port’s words', async () => {
    const d = door();
    expect(d.fronts('nlp.other')).toBe(false);
    await expect(d.register('nlp.other', [{ ip: '10.0.0.1', port: 80 }])).rejects.toSatisfy(
      (e) =>
        isCloudError(e, 'not-found') && /service nlp.other has no target group \(services with one: nlp.chat\)/.test((e as Error).message),
    );
    elb.fail('RegisterTargets', 'Throttling', 400);
    await expect(d.register('nlp.chat', [{ ip: '10.0.0.1', port: 80 }])).rejects.toSatisfy((e) => isCloudError(e, 'throttled'));
    const gone = new ElbFrontDoor(
      new ElasticLoadBalancingV2Client({
        region: 'us-west-2',
        endpoint: elb.endpoint,
        credentials: { accessKeyId: 'x', secretAccessKey: 'x' },
        maxAttempts: 1,
      }),
      { 'nlp.chat': `${ARN}-deleted` },
    );
    await expect(gone.targets('nlp.chat')).rejects.toSatisfy((e) => isCloudError(e, 'not-found'));
  });
});
