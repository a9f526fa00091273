import { CloudWatchClient, GetMetricStatisticsCommand } from '@aws-sdk/client-cloudwatch';
import { mockClient } from 'aws-sdk-client-mock';
import { describe, expect, it } from 'vitest';
import { s3BucketBytes } from '../../cloud/aws/cloudwatch-metrics.ts';
import { isCloudError } from '../../core/errors.ts';
import { againstBucket } from '../../cli/finops/report.ts';

/** The checkpoint bucket's own count of what it holds: S3's daily storage metric, which `report` sets beside the index's. */
describe('the checkpoint bucket size from CloudWatch (s3BucketBytes)', () => {
  const now = Date.UTC(2026, 11, 6, 12);
  const clock = { nowMs: () => now };

  it('asks for the Standard storage of the bucket of the checkpoint root, daily, and takes the newest day', async () => {
    const cw = mockClient(CloudWatchClient);
    cw.on(GetMetricStatisticsCommand).resolves({
      Datapoints: [
        { Timestamp: new Date(Date.UTC(2026, 11, 4)), Average: 5e12 },
        { Timestamp: new Date(Date.UTC(2026, 11, 5)), Average: 6e12 },
        { Timestamp: new Date(Date.UTC(2026, 11, 3)), Average: 4e12 },
      ],
    });
    const got = await s3BucketBytes(cw as unknown as CloudWatchClient, 's3://fleet-ckpt/checkpoints/', clock);
    expect(got).toEqual({ bytes: 6e12, atMs: Date.UTC(2026, 11, 5), source: 'CloudWatch AWS/S3 BucketSizeBytes of fleet-ckpt' });
    const input = cw.commandCalls(GetMetricStatisticsCommand)[0]!.args[0].input;
    expect(input).toMatchObject({
      Namespace: 'AWS/S3',
      MetricName: 'BucketSizeBytes',
      Period: 86_400,
      Dimensions: [
        { Name: 'BucketName', Value: 'fleet-ckpt' },
        { Name: 'StorageType', Value: 'StandardStorage' },
      ],
    });
    expect(input.EndTime!.getTime() - input.StartTime!.getTime()).toBe(3 * 86_400_000);
  });

  it('says nothing for a bucket S3 has not measured yet, or a root that is no bucket; a refusal is a cloud error', async () => {
    const cw = mockClient(CloudWatchClient);
    cw.on(GetMetricStatisticsCommand).resolves({ Datapoints: [] });
    expect(await s3BucketBytes(cw as unknown as CloudWatchClient, 'fleet-ckpt', clock)).toBeUndefined();
    expect(await s3BucketBytes(cw as unknown as CloudWatchClient, 'file:///var/ckpt/', clock)).toBeUndefined();
    cw.on(GetMetricStatisticsCommand).rejects(Object.assign(new Error('not authorized'), { name: 'AccessDenied', $metadata: {} }));
    const err = await s3BucketBytes(cw as unknown as CloudWatchClient, 'fleet-ckpt', clock).catch((e: unknown) => e);
    expect(isCloudError(err, 'access-denied')).toBe(true);
  });
});

describe("report: the index's count beside the bucket's (againstBucket)", () => {
  it('counts what the index held when the bucket measured itself, not what it holds now', () => {
    const day = Date.UTC(2026, 11, 5);
    const owner = { jobId: 'nlp.a', team: 'nlp' };
    const save = (location: string, bytes: number, savedAtMs: number, deletedAtMs?: number) => ({
      location,
      bytes,
      writeRequests: 1,
      readRequests: 1,
      savedAtMs,
      ...(deletedAtMs !== undefined ? { deletedAtMs } : {}),
    });
    // Held at the metric's time: s1 (deleted since) and s2; s3 came after it; s0 was gone before it.
    const logs = [
      {
        owner,
        saves: [
          save('s0', 7e9, day - 7_200_000, day - 3_600_000),
          save('s1', 4e9, day - 3_600_000, day + 3_600_000),
          save('s2', 5e9, day - 60_000),
          save('s3', 9e9, day + 60_000),
        ],
      },
    ];
    expect(againstBucket(logs, { bytes: 10e9, atMs: day, source: 'S3' })).toEqual({
      heldGiB: 10e9 / 2 ** 30,
      atMs: day,
      source: 'S3',
      indexLessBucketPct: -10,
    });
  });
});
