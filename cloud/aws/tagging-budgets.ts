import { GetResourcesCommand, type ResourceGroupsTaggingAPIClient } from '@aws-sdk/client-resource-groups-tagging-api';
import { BUDGET_TAGS } from '../../core/budget.ts';
import type { BudgetTagSource, TeamTagSet } from '../../core/ports.ts';
import { translateAwsError } from './errors.ts';

/**
 * Budget tags, read live with the Resource Groups Tagging API: every resource carrying
 * `gpu-fleet:team`, with its `gpu-fleet:*` tags (paginated). Only the team's own queue
 * (`<prefix><team>`) sets its budget: any other resource carrying `gpu-fleet:team` (a scratch
 * queue, a bucket, another stack's queue) comes back marked, and core reports it as a problem of
 * that team and ignores its tags. Nothing is parsed here: core reads the values, reports bad
 * ones and keeps the last valid budget.
 */
export class TaggingBudgetSource implements BudgetTagSource {
  constructor(
    private readonly tagging: ResourceGroupsTaggingAPIClient,
    private readonly options: { readonly teamQueuePrefix: string },
  ) {}

  async readTeamTags(): Promise<TeamTagSet[]> {
    const out: TeamTagSet[] = [];
    let token: string | undefined;
    do {
      let page;
      try {
        page = await this.tagging.send(
          new GetResourcesCommand({
            TagFilters: [{ Key: BUDGET_TAGS.team }],
            ResourcesPerPage: 100,
            ...(token ? { PaginationToken: token } : {}),
          }),
        );
      } catch (error) {
        throw translateAwsError(error, { operation: 'read budget tags', resource: BUDGET_TAGS.team });
      }
      for (const r of page.ResourceTagMappingList ?? []) {
        const tags: Record<string, string> = {};
        for (const t of r.Tags ?? []) if (t.Key?.startsWith('gpu-fleet:') && t.Value !== undefined) tags[t.Key] = t.Value;
        const team = tags[BUDGET_TAGS.team]?.trim();
        if (!team) continue;
        const resource = r.ResourceARN ?? '';
        const queue = `${this.options.teamQueuePrefix}${team}`;
        out.push({
          team,
          resource,
          tags,
          ...(sqsQueueName(resource) === queue ? {} : { notTheTeamQueue: `budget tags are read only from the team's queue ${queue}` }),
        });
      }
      token = page.PaginationToken || undefined; // the last page says ""
    } while (token);
    return out.sort((a, b) => (a.resource < b.resource ? -1 : a.resource > b.resource ? 1 : 0));
  }
}

/** The queue name of an SQS queue ARN (`arn:aws:sqs:region:account:name`), or undefined for any other ARN. */
function sqsQueueName(arn: string): string | undefined {
  const parts = arn.split(':');
  return parts.length === 6 && parts[0] === 'arn' && parts[2] === 'sqs' ? parts[5] : undefined;
}
