"""The workflow's side: what the Snakefile and its rules read, and the command lines its jobs run.

    config         load, validate and resolve config/config.yaml (ConfigError names the field and the fix)
    jobs           the jobs a resolved config asks for: generation groups, train runs, paths, workloads
    sources        a job's code inputs: the import closure of its command
    plan           a dry run's job list and GPU-time estimate
    invalid_stats  a corrupt stats file is set aside with what was made from it
    publish        a run's results copied under results/published/<folder> with its manifest
    smoke          the smoke profile on a GPU host, in a few minutes
    cli            `python -m rollout_bench generate|autotune|decode-profile|gemm-bench|publish|trace|check-config`
"""
