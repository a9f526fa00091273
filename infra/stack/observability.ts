import { Duration } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as cwActions from 'aws-cdk-lib/aws-cloudwatch-actions';
import * as sns from 'aws-cdk-lib/aws-sns';
import * as subscriptions from 'aws-cdk-lib/aws-sns-subscriptions';
import { AGENT_METRICS } from '../../cloud/aws/cloudwatch-metrics.ts';
import { METRICS_NAMESPACE } from '../../functions/observability.ts';
import type { GpuFleetConfig } from '../config.ts';
import type { FleetStack } from './parts.ts';

export function dashboardFor(stack: FleetStack, config: GpuFleetConfig): cloudwatch.Dashboard {
  const ns = METRICS_NAMESPACE;
  const search = (expr: string, label: string, period = Duration.minutes(1)) =>
    new cloudwatch.MathExpression({ expression: expr, label, period, usingMetrics: {} });
  const d = new cloudwatch.Dashboard(stack, 'Dashboard', {
    dashboardName: `${stack.stackName}-gpu-fleet`,
    defaultInterval: Duration.hours(6),
  });
  d.addWidgets(
    new cloudwatch.GraphWidget({
      title: 'Queue depth per team',
      width: 12,
      left: [search(`SEARCH('{${ns},Team,service} MetricName="QueueDepth"', 'Maximum', 60)`, '')],
    }),
    new cloudwatch.GraphWidget({
      title: 'Jobs waiting and running',
      width: 12,
      left: ['PendingJobs', 'RunningJobs', 'PendingGpus'].map(
        (m) =>
          new cloudwatch.Metric({
            namespace: ns,
            metricName: m,
            dimensionsMap: { service: 'gpu-fleet-reconcile' },
            statistic: 'Maximum',
            period: Duration.minutes(1),
          }),
      ),
    }),
  );
  // Services: replicas wanted against ready (from reconcile), and what each target group's load balancer sees.
  if (stack.serviceTargets.length > 0) {
    const groups = stack.serviceTargets.map((t) => [t.id, t.dimension] as const);
    const reconcileMetric = (metricName: string, service: string, statistic: string, period: Duration) =>
      new cloudwatch.Metric({
        namespace: ns,
        metricName,
        dimensionsMap: { Service: service, service: 'gpu-fleet-reconcile' },
        statistic,
        period,
      });
    d.addWidgets(
      new cloudwatch.GraphWidget({
        title: 'Service replicas: wanted and ready',
        width: 12,
        left: [
          search(`SEARCH('{${ns},Service,service} MetricName="ServiceReplicasWanted"', 'Maximum', 60)`, 'wanted'),
          search(`SEARCH('{${ns},Service,service} MetricName="ServiceReplicasReady"', 'Minimum', 60)`, 'ready'),
        ],
      }),
      new cloudwatch.GraphWidget({
        title: 'Service availability (% of reconciles with ready ≥ wanted, hourly) and cost ($ per hour)',
        width: 12,
        left: groups.map(
          ([id]) =>
            new cloudwatch.MathExpression({
              expression: '100 * a',
              label: `${id} availability %`,
              period: Duration.hours(1),
              usingMetrics: { a: reconcileMetric('ServiceAvailable', id, 'Average', Duration.hours(1)) },
            }),
        ),
        right: groups.map(
          ([id]) =>
            new cloudwatch.MathExpression({
              expression: 'c / 1000000',
              label: `${id} $ per hour`,
              period: Duration.minutes(5),
              usingMetrics: { c: reconcileMetric('ServiceCostMicroUsdPerHour', id, 'Average', Duration.minutes(5)) },
            }),
        ),
        leftYAxis: { min: 0, max: 100 },
      }),
      new cloudwatch.GraphWidget({
        title: 'Service requests within objective (% by the queueing model of the ready replicas, hourly)',
        width: 12,
        left: groups.map(
          ([id]) =>
            new cloudwatch.MathExpression({
              expression: '100 * w / r',
              label: `${id} within objective %`,
              period: Duration.hours(1),
              usingMetrics: {
                w: reconcileMetric('ServiceRequestsWithinObjectivePerSecond', id, 'Average', Duration.hours(1)),
                r: reconcileMetric('ServiceRequestsPerSecond', id, 'Average', Duration.hours(1)),
              },
            }),
        ),
        leftYAxis: { min: 0, max: 100 },
      }),
      new cloudwatch.GraphWidget({
        title: 'Service requests per target (per minute) and healthy targets',
        width: 12,
        left: groups.map(
          ([id, arn]) =>
            new cloudwatch.Metric({
              namespace: 'AWS/ApplicationELB',
              metricName: 'RequestCountPerTarget',
              dimensionsMap: { TargetGroup: arn },
              statistic: 'Sum',
              period: Duration.minutes(1),
              label: `${id} requests per target`,
            }),
        ),
        right: groups.map(([id, arn]) =>
          search(
            `SEARCH('{AWS/ApplicationELB,LoadBalancer,TargetGroup} MetricName="HealthyHostCount" TargetGroup="${arn}"', 'Minimum', 60)`,
            `${id} healthy targets`,
          ),
        ),
      }),
    );
  }
  // Reserved capacity: machines running in each reservation against its size (its utilisation; unused is paid all the same).
  d.addWidgets(
    new cloudwatch.GraphWidget({
      title: 'Reservations: machines used and reserved',
      width: 12,
      left: [
        search(`SEARCH('{${ns},Reservation,service} MetricName="ReservationInstancesUsed"', 'Average', 300)`, 'used', Duration.minutes(5)),
        search(`SEARCH('{${ns},Reservation,service} MetricName="ReservationInstances"', 'Maximum', 300)`, 'reserved', Duration.minutes(5)),
      ],
    }),
  );
  d.addWidgets(
    new cloudwatch.GraphWidget({
      title: 'Fleet size by node group and capacity type',
      width: 12,
      stacked: true,
      left: [search(`SEARCH('{${ns},CapacityType,NodeGroup,service} MetricName="FleetSize"', 'Maximum', 60)`, '')],
      // Warm pools beside the groups that have one: machines prepared ahead, not yet the group's capacity.
      ...(config.nodeGroups.some((g) => g.warmPool)
        ? { right: [search(`SEARCH('{${ns},NodeGroup,service} MetricName="WarmPoolReady"', 'Minimum', 60)`, 'warm ')] }
        : {}),
    }),
    new cloudwatch.GraphWidget({
      title: 'GPU utilisation by node group (mean over GPUs)',
      width: 12,
      left: config.nodeGroups.map((g) =>
        search(
          `AVG(SEARCH('{${AGENT_METRICS.namespace},GpuIndex,InstanceId,NodeGroup} MetricName="${AGENT_METRICS.utilization}" NodeGroup="${stack.stackName}-${g.name}"', 'Average', 300))`,
          g.name,
          Duration.minutes(5),
        ),
      ),
      leftYAxis: { min: 0, max: 100, label: '%' },
    }),
  );
  d.addWidgets(
    new cloudwatch.GraphWidget({
      title: "Spend against budget, per team (% of the period's budget)",
      width: 12,
      left: [search(`SEARCH('{${ns},Team,service} MetricName="TeamBudgetUsedPct"', 'Maximum', 300)`, '', Duration.minutes(5))],
      leftAnnotations: [{ value: 100, label: 'budget', color: cloudwatch.Color.RED }],
    }),
    new cloudwatch.GraphWidget({
      title: 'Interruptions and requeues',
      width: 12,
      left: ['SpotInterruptions', 'NodeNotices', 'JobsRequeued'].map(
        (m) =>
          new cloudwatch.Metric({
            namespace: ns,
            metricName: m,
            dimensionsMap: { service: 'gpu-fleet-interruption' },
            statistic: 'Sum',
            period: Duration.minutes(5),
          }),
      ),
    }),
  );
  d.addWidgets(
    new cloudwatch.GraphWidget({
      title: 'Reconcile duration',
      width: 8,
      left: [
        stack.functions.reconcile.metricDuration({ statistic: 'p99' }),
        stack.functions.reconcile.metricDuration({ statistic: 'Average' }),
      ],
      right: [
        new cloudwatch.Metric({
          namespace: ns,
          metricName: 'PlanTime',
          dimensionsMap: { service: 'gpu-fleet-reconcile' },
          statistic: 'Maximum',
        }),
      ],
    }),
    new cloudwatch.GraphWidget({
      title: 'Reconcile errors',
      width: 8,
      left: [
        stack.functions.reconcile.metricErrors({ statistic: 'Sum' }),
        new cloudwatch.Metric({
          namespace: ns,
          metricName: 'ReconcileErrors',
          dimensionsMap: { service: 'gpu-fleet-reconcile' },
          statistic: 'Sum',
        }),
      ],
    }),
    new cloudwatch.GraphWidget({
      title: 'Jobs taken in',
      width: 8,
      left: ['JobsAccepted', 'JobsRejected', 'JobsDeadLettered'].map(
        (m) =>
          new cloudwatch.Metric({
            namespace: ns,
            metricName: m,
            dimensionsMap: { service: 'gpu-fleet-intake' },
            statistic: 'Sum',
            period: Duration.minutes(5),
          }),
      ),
    }),
  );
  return d;
}

export function alarmsFor(stack: FleetStack, config: GpuFleetConfig): void {
  const topic = new sns.Topic(stack, 'Alarms', { displayName: 'gpu-fleet alarms', masterKey: stack.key, enforceSSL: true });
  if (config.alarmEmail) topic.addSubscription(new subscriptions.EmailSubscription(config.alarmEmail));
  const add = (id: string, alarm: Omit<cloudwatch.AlarmProps, 'actionsEnabled'>) => {
    const a = new cloudwatch.Alarm(stack, id, { ...alarm, actionsEnabled: true });
    a.addAlarmAction(new cwActions.SnsAction(topic));
    stack.alarms.push(a);
  };
  add('DeadLettersNotEmpty', {
    alarmDescription: 'Job specs or events gpu-fleet could not attribute or process are waiting in the dead-letter queue.',
    metric: stack.deadLetters.metricApproximateNumberOfMessagesVisible({ period: Duration.minutes(1), statistic: 'Maximum' }),
    threshold: 0,
    comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
    evaluationPeriods: 1,
    treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
  });
  add('FunctionFailuresNotEmpty', {
    alarmDescription: 'A function invocation failed after its retries (reconcile or interruption).',
    metric: stack.failures.metricApproximateNumberOfMessagesVisible({ period: Duration.minutes(1), statistic: 'Maximum' }),
    threshold: 0,
    comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
    evaluationPeriods: 1,
    treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
  });
  add('ReconcileFailing', {
    alarmDescription: 'Reconcile has failed (or recorded action errors) in 3 of the last 5 minutes.',
    metric: new cloudwatch.MathExpression({
      expression: 'errors + actionErrors',
      usingMetrics: {
        errors: stack.functions.reconcile.metricErrors({ period: Duration.minutes(1), statistic: 'Sum' }),
        actionErrors: new cloudwatch.Metric({
          namespace: METRICS_NAMESPACE,
          metricName: 'ReconcileErrors',
          dimensionsMap: { service: 'gpu-fleet-reconcile' },
          period: Duration.minutes(1),
          statistic: 'Sum',
        }),
      },
      period: Duration.minutes(1),
    }),
    threshold: 0,
    comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
    evaluationPeriods: 5,
    datapointsToAlarm: 3,
    treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
  });
  // A figure reconcile reports each minute (its largest in the minute): degraded providers, machines silent together.
  const reconcileGauge = (metricName: string) =>
    new cloudwatch.Metric({
      namespace: METRICS_NAMESPACE,
      metricName,
      dimensionsMap: { service: 'gpu-fleet-reconcile' },
      period: Duration.minutes(1),
      statistic: 'Maximum',
    });
  add('ProviderDegraded', {
    alarmDescription:
      'A cloud provider (a region, GCP projects) or a node group has been left out of reconcile for 5 minutes because its API calls fail: it is not scaled, and work only it could run waits (gpu-fleet status says which, since when, and the last error).',
    metric: reconcileGauge('DegradedProviders'),
    threshold: 0,
    comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
    evaluationPeriods: 5,
    datapointsToAlarm: 5,
    treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
  });
  add('ControlPlaneSilence', {
    alarmDescription:
      "Most machines of a zone stopped sending heartbeats at once while their cloud lists them running: the agent API (or its table) is failing, not the machines. Reconcile requeues nothing for it and lets none of them go (gpu-fleet status names the zones); check the agent API function's errors and throttles.",
    metric: reconcileGauge('SilentTogetherMachines'),
    threshold: 0,
    comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
    evaluationPeriods: 2,
    datapointsToAlarm: 2,
    treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
  });
  add('UnreadableNodeRecords', {
    alarmDescription:
      "A machine's stored GPU report cannot be read, so the planner leaves the machine out (no work goes to it); the decision record's plan names the machine and what is wrong. Its agent's next registration replaces the record.",
    metric: reconcileGauge('UnreadableNodeRecords'),
    threshold: 0,
    comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
    evaluationPeriods: 1,
    treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
  });
  add('ReconcileNotRunning', {
    alarmDescription: 'Reconcile has not run for 5 minutes: nothing scales, nothing is placed.',
    metric: stack.functions.reconcile.metricInvocations({ period: Duration.minutes(5), statistic: 'Sum' }),
    threshold: 1,
    comparisonOperator: cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
    evaluationPeriods: 1,
    treatMissingData: cloudwatch.TreatMissingData.BREACHING,
  });
  for (const team of config.teams) {
    for (const pct of team.alertAtPct) {
      add(`Budget-${team.name}-${pct}`, {
        alarmDescription: `Team ${team.name} has spent ${pct}% of its ${team.period} budget (as configured at deploy; the live tags decide what gpu-fleet enforces).`,
        metric: new cloudwatch.Metric({
          namespace: METRICS_NAMESPACE,
          metricName: 'TeamBudgetUsedPct',
          dimensionsMap: { service: 'gpu-fleet-reconcile', Team: team.name },
          period: Duration.minutes(5),
          statistic: 'Maximum',
        }),
        threshold: pct,
        comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        evaluationPeriods: 1,
        treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      });
    }
  }
}
