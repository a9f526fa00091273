import { type Stack, Validations } from 'aws-cdk-lib';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as logs from 'aws-cdk-lib/aws-logs';
import type { Construct } from 'constructs';

/** The region as cdk-nag prints it in finding ids: the name when the stack has one, else the pseudo parameter. */
export function nagRegion(stack: Stack): string {
  return /^[a-z]{2}(-gov)?-[a-z]+-\d$/.test(stack.region) ? stack.region : '<AWS::Region>';
}

/** Acknowledges cdk-nag findings on a construct (and its children), each with its reason. */
export function acknowledge(scope: Construct, reasons: Record<string, string>): void {
  for (const [id, reason] of Object.entries(reasons)) Validations.of(scope).acknowledge({ id: `AwsSolutions::${id}`, reason });
}

/** One least-privilege statement on a role: these actions on these resources (under these conditions). */
export function allow(role: iam.IRole, sid: string, actions: string[], resources: string[], conditions?: Record<string, unknown>): void {
  role.addToPrincipalPolicy(new iam.PolicyStatement({ sid, actions, resources, ...(conditions ? { conditions } : {}) }));
}

/** The log group retention of the config's days (CloudWatch Logs takes only some values; the config allows only those). */
export function retentionOf(days: number): logs.RetentionDays {
  const found = Object.values(logs.RetentionDays).find((v) => v === days);
  if (found === undefined) throw new Error(`jobLogs.retentionDays ${days} is not a CloudWatch Logs retention`);
  return found as logs.RetentionDays;
}

/** TCP port ranges covering 1–65535 but the given ports. */
export function tcpRangesWithout(ports: readonly number[]): { from: number; to: number }[] {
  const out: { from: number; to: number }[] = [];
  let from = 1;
  for (const p of [...new Set(ports)].sort((a, b) => a - b)) {
    if (p > from) out.push({ from, to: p - 1 });
    from = Math.max(from, p + 1);
  }
  if (from <= 65535) out.push({ from, to: 65535 });
  return out;
}
