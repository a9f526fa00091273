import { describe, expect, it } from 'vitest';
import { imageName, imageProblem, ImagePolicySchema } from '../../core/images.ts';

describe('which images a spec may name', () => {
  it('reads the registry and repository as docker does', () => {
    expect(imageName('pytorch/pytorch:2.3.0-cuda12.1')).toEqual({ registry: 'docker.io', repository: 'pytorch/pytorch' });
    expect(imageName('ubuntu')).toEqual({ registry: 'docker.io', repository: 'library/ubuntu' });
    expect(imageName('nvcr.io/nvidia/pytorch:24.05-py3')).toEqual({ registry: 'nvcr.io', repository: 'nvidia/pytorch' });
    expect(imageName('Registry.Example.com:5000/team/x@sha256:' + 'a'.repeat(64))).toEqual({
      registry: 'registry.example.com:5000',
      repository: 'team/x',
    });
    expect(imageName('localhost/x:1')).toEqual({ registry: 'localhost', repository: 'x' });
    expect(imageName('index.docker.io/library/busybox')).toEqual({ registry: 'docker.io', repository: 'library/busybox' });
  });

  it('refuses a registry named by an address, loopback, link-local or a metadata server, whatever the config says', () => {
    for (const image of [
      '10.0.3.7:5000/x:1',
      '169.254.169.254/latest:1',
      '127.0.0.1:2375/x',
      '[fd00:ec2::254]:80/x',
      'localhost:5000/x',
      'a.localhost/x',
      'metadata.google.internal/computeMetadata:v1',
    ])
      expect(imageProblem(image, 'nlp'), image).toMatch(/^image /);
    expect(imageProblem('10.0.3.7:5000/x:1', 'nlp')).toBe(
      'image names the registry by the address 10.0.3.7; name it by its DNS name (an address would let a spec probe the network the machines sit on)',
    );
    expect(imageProblem('nvcr.io/nvidia/pytorch:24.05-py3', 'nlp')).toBeUndefined();
  });

  it("keeps specs to the config's registries, and a team's private repositories to that team", () => {
    const policy = ImagePolicySchema.parse({
      registries: ['docker.io', '123456789012.dkr.ecr.us-east-1.amazonaws.com'],
      teamRepositories: [{ repositories: '123456789012.dkr.ecr.us-east-1.amazonaws.com/nlp/*', teams: ['nlp'] }],
    });
    const ecr = '123456789012.dkr.ecr.us-east-1.amazonaws.com';
    expect(imageProblem('pytorch/pytorch:2.3.0', 'cv', policy)).toBeUndefined();
    expect(imageProblem(`${ecr}/nlp/trainer:7`, 'nlp', policy)).toBeUndefined();
    expect(imageProblem(`${ecr}/nlp/trainer:7`, 'cv', policy)).toBe(
      `image: ${ecr}/nlp/trainer is a repository of team nlp; team cv may not run it`,
    );
    expect(imageProblem(`${ecr}/shared/base:1`, 'cv', policy)).toBeUndefined();
    expect(imageProblem('nvcr.io/nvidia/pytorch:24.05-py3', 'nlp', policy)).toBe(
      `image: registry nvcr.io is not one this fleet allows; allowed: docker.io, ${ecr}`,
    );
  });

  it('lets a spec run a root image as root only for the teams the config names', () => {
    expect(imageProblem('pytorch/pytorch:2.3.0', 'nlp', {}, true)).toBe(
      "container.runAsRoot: team nlp may not run a container as root (the fleet config's images.rootTeams names no team); leave it out, and an image whose user is root runs as uid 65534",
    );
    const policy = ImagePolicySchema.parse({ rootTeams: ['cv'] });
    expect(imageProblem('pytorch/pytorch:2.3.0', 'cv', policy, true)).toBeUndefined();
    expect(imageProblem('pytorch/pytorch:2.3.0', 'nlp', policy, true)).toMatch(/images.rootTeams names cv\)/);
    expect(imageProblem('pytorch/pytorch:2.3.0', 'nlp', policy, false)).toBeUndefined();
    expect(ImagePolicySchema.safeParse({ rootTeams: ['CV'] }).success).toBe(false);
  });

  it('refuses a config that names a registry by its address', () => {
    const bad = ImagePolicySchema.safeParse({ registries: ['10.0.0.5:5000'] });
    expect(bad.success).toBe(false);
    expect(ImagePolicySchema.safeParse({ teamRepositories: [{ repositories: 'nvcr.io/nlp/*', teams: ['NLP'] }] }).success).toBe(false);
  });
});
