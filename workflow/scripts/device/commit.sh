#!/bin/bash
# Here, before carrying: the commit the checkout is carried at, for the stats (envinfo.code_version) on a host
# whose copy has no .git.
cd "$(git rev-parse --show-toplevel)" || exit 1
mkdir -p .carry
dirty=$(git status --porcelain --untracked-files=no | grep -q . && echo 1 || echo 0)
printf 'export ROLLOUT_BENCH_GIT_COMMIT=%s ROLLOUT_BENCH_GIT_DIRTY=%s\n' "$(git rev-parse HEAD)" "$dirty" > .carry/commit.env
cat .carry/commit.env
