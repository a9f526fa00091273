import { GetResourcesCommand, type ResourceGroupsTaggingAPIClient } from '@aws-sdk/client-resource-groups-tagging-api';
import { BUDGET_TAGS } from '../../core/budget.ts';
import type { BudgetTagSource, TeamTagSet } from '../../core/ports.ts';
import { translateAwsError } from './errors.ts';

/**
 * Budget tags, read live with the Resource Groups Tagging API: every resource carrying
 * `gpu-fleet:team`, with its `gpu-fleet:*` tags (paginated). A team's queue comes first, so its
 * tags win over other resources of the team. Nothing is parsed here: core reads the values,
 * reports bad ones and keeps the last valid budget.
 */
export class TaggingBudgetSource implements BudgetTagSource {
  constructor(private readonly tagging: ResourceGroupsTaggingAPIClient) {}

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
        if (team) out.push({ team, resource: r.ResourceARN ?? '', tags });
      }
      token = page.PaginationToken || undefined; // the last page says ""
    } while (token);
    const rank = (arn: string) => (arn.startsWith('arn:aws:sqs:') ? 0 : 1);
    return out.sort((a, b) => rank(a.resource) - rank(b.resource) || (a.resource < b.resource ? -1 : 1));
  }
}
