# One job per (model, backend, variant, case, batch size), pinned to leased GPUs on a GPU host.


rule generate:
    input:
        model=model_input,
        adapter=lambda wc: [lora_dir(wc.model)] if job_workload(wc)["lora_rank"] else [],
        dataset=lambda wc: dataset_input(job_workload(wc)["dataset"]),
        code=backend_sources,
        autotune=autotune_input,
    output:
        "results/generate/{model}/{backend}/{variant}/{case}/bs{bs}.json",
    params:
        workload=lambda wc: json.dumps(job_workload(wc), sort_keys=True),
        # re-evaluates a `skipped` result when what decides it changes (packages, GPUs)
        probe=lambda wc: rb_backends.fingerprint(wc.backend),
        model_dir=lambda wc: model_dir(wc.model),
        adapter=lambda wc: lora_dir(wc.model) if job_workload(wc)["lora_rank"] else "",
        dataset=lambda wc: dataset_dir(job_workload(wc)["dataset"]),
        pin=lambda wc: ",".join(map(str, CFG["gpu"]["pin"].get(wc.backend, []))),
        alone=lease_alone,
    log:
        "results/logs/generate/{model}/{backend}/{variant}/{case}/bs{bs}.log",
    benchmark:
        "results/benchmarks/generate/{model}/{backend}/{variant}/{case}/bs{bs}.tsv"
    threads: GPU_JOB_THREADS
    resources:
        gpu=gpu_slots,
    conda:
        backend_env
    shell:
        f"{LEASE}{{params.alone}}--pin '{{params.pin}}' -- "
        "python -m rollout_bench generate --backend {wildcards.backend} --variant {wildcards.variant} "
        "--model {wildcards.model} --case {wildcards.case} --workload {params.workload:q} "
        "--model-dir {params.model_dir} --adapter '{params.adapter}' --dataset {params.dataset} "
        "--autotune '{input.autotune}' --out {output} > {log} 2>&1"


# The autotune-replay pass: flex's decode kernel options measured once per model on the GPU.
rule autotune:
    input:
        model=model_input,
        code=code("cli:_autotune", "gpu_lease"),
    output:
        "results/autotune/{model}/decode_opts.json",
    params:
        workload=lambda wc: json.dumps(rb_config.autotune_workload(CFG, model_source(wc.model)), sort_keys=True),
        batch_sizes=",".join(map(str, CFG["autotune"]["batch_sizes"])),
        model_dir=lambda wc: model_dir(wc.model),
    log:
        "results/logs/autotune/{model}/decode_opts.log",
    benchmark:
        "results/benchmarks/autotune/{model}/decode_opts.tsv"
    threads: GPU_JOB_THREADS
    resources:
        gpu=GPU_PER_JOB,
    conda:
        "../envs/core.yaml"
    shell:
        f"{LEASE}--pin '' -- "
        "python -m rollout_bench autotune --model {wildcards.model} --model-dir {params.model_dir} "
        "--workload {params.workload:q} --batch-sizes {params.batch_sizes} --out {output} > {log} 2>&1"


# Where a flex decode step's time goes (decode_profile.enabled), per model, with the options flex jobs replay.
# A job of its own rather than a field of the autotune record that every flex job reads: an edit to the
# diagnostic re-runs this job and its table alone.
rule decode_profile:
    input:
        model=model_input,
        autotune=lambda wc: [f"results/autotune/{wc.model}/decode_opts.json"] if CFG["autotune"]["enabled"] else [],
        code=code("cli:_decode_profile", "gpu_lease"),
    output:
        "results/decode_profile/{model}/decode_step.json",
    params:
        workload=lambda wc: json.dumps(rb_config.autotune_workload(CFG, model_source(wc.model)), sort_keys=True),
        batch_sizes=",".join(map(str, CFG["decode_profile"]["batch_sizes"])),
        model_dir=lambda wc: model_dir(wc.model),
    log:
        "results/logs/decode_profile/{model}/decode_step.log",
    benchmark:
        "results/benchmarks/decode_profile/{model}/decode_step.tsv"
    threads: GPU_JOB_THREADS
    resources:
        gpu=GPU_PER_JOB,
    conda:
        "../envs/core.yaml"
    shell:
        f"{LEASE}--pin '' -- "
        "python -m rollout_bench decode-profile --model {wildcards.model} --model-dir {params.model_dir} "
        "--workload {params.workload:q} --batch-sizes {params.batch_sizes} --autotune '{input.autotune}' "
        "--out {output} > {log} 2>&1"
