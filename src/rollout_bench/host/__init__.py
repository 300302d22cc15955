"""The host a job runs on: its share of the GPUs and CPUs, and what it installs and caches there.

    gpu_lease      a GPU job's lease (`python -m rollout_bench.host.gpu_lease -- cmd`): its GPUs, CPU share, log
    isolation      the lease log: which jobs overlapped a job's run; the GPU lock files
    cpu_share      the CPUs a GPU job is pinned to
    copy_rate      the device's measured memory-copy rate (bandwidth figures are read against it)
    compile_cache  Inductor/Triton/vLLM compile caches shared by every GPU job (config cache_dir)
    trl_cpu        TRL's Triton log-prob head in plain torch, on a host without Triton
    wheelhouse     an environment group's wheels built here, installed on an offline GPU host (deployment, no job
                   imports it)
"""
