# One job per (model, backend, variant, LoRA on or off): one process and one engine serve its cells (case, batch
# size) in order, each writing its own stats file (jobs.gen_groups, generation/job.py). A rule a job: its outputs
# are its cells', so a changed cell (workload, code, assets) reruns its whole job.
for _g in GEN_GROUPS:

    rule:
        name:
            _g.rule_name
        input:
            model=model_input_of(_g.model),
            adapter=[lora_dir(_g.model_slug)] if _g.lora else [],
            dataset=group_datasets(_g),
            code=backend_sources_of(_g.backend),
            autotune=autotune_input_of(_g.model, _g.backend),
        output:
            cells=[c.path for c in _g.cells],
            job=_g.record,
        params:
            cells=group_cells(_g),
            # re-evaluates a `skipped` result when what decides it changes (packages, GPUs, the group's site)
            probe=probe_of(_g.backend, _g.variant),
            model_dir=lambda wc, g=_g: model_dir(g.model_slug),
            adapter=lambda wc, g=_g: lora_dir(g.model_slug) if g.lora else "",
            pin=",".join(map(str, CFG["gpu"]["pin"].get(_g.backend, []))),
            alone=lease_alone_of(_g.backend, CFG["options"].get(_g.backend, {})),
            cache=CFG["cache_dir"] or "",
            backend=_g.backend,
            variant=_g.variant,
            model=_g.model_slug,
            # bound here: the shell's f-string is evaluated again when the job runs, with the loop's last _g
            site=site_of(_g.backend, _g.variant),
        log:
            f"results/logs/generate/{_g.key}.log",
        benchmark:
            f"results/benchmarks/generate/{_g.key}.tsv"
        threads: GPU_JOB_THREADS
        resources:
            gpu=gpu_slots_of(_g.backend, CFG["options"].get(_g.backend, {})),
        conda:
            backend_env_of(_g.backend, _g.variant)
        shell:
            f"{{params.site}}{LEASE_JOB}{{params.alone}}--pin '{{params.pin}}' -- "
            "python -m rollout_bench generate --backend {params.backend} --variant {params.variant} "
            "--model {params.model} --cells {params.cells:q} --model-dir {params.model_dir} "
            "--adapter '{params.adapter}' --autotune '{input.autotune}' --cache-dir '{params.cache}' "
            "--job-out {output.job} > {log} 2>&1"


# Mismatch beside speed: per model, every cell of an engine that returns logprobs, its sampled tokens scored by the
# trainer's forward (generation/mismatch.py). After the model's generation jobs (its inputs): the trainer's weights
# never share the GPU with that model's engines.
rule mismatch:
    input:
        stats=lambda wc: [c.path for c in MISMATCH_JOBS[wc.model].cells],
        model=model_input,
        adapter=lambda wc: [lora_dir(wc.model)] if MISMATCH_JOBS[wc.model].lora else [],
        code=code("pipeline.cli:_mismatch", "host.gpu_lease"),
    output:
        "results/mismatch/{model}.json",
    params:
        model_dir=lambda wc: model_dir(wc.model),
        adapter=lambda wc: lora_dir(wc.model) if MISMATCH_JOBS[wc.model].lora else "",
    log:
        "results/logs/mismatch/{model}.log",
    benchmark:
        "results/benchmarks/mismatch/{model}.tsv"
    threads: GPU_JOB_THREADS
    resources:
        gpu=GPU_PER_JOB,
    conda:
        "../envs/core.yaml"
    shell:
        f"{LEASE}--pin '' -- "
        "python -m rollout_bench mismatch --model {wildcards.model} --model-dir {params.model_dir} "
        "--adapter '{params.adapter}' --stats {input.stats} --out {output} > {log} 2>&1"


# The autotune-replay pass: flex's decode kernel options measured once per model on the GPU.
rule autotune:
    input:
        model=model_input,
        code=code("pipeline.cli:_autotune", "host.gpu_lease"),
    output:
        "results/autotune/{model}/decode_opts.json",
    params:
        workload=lambda wc: json.dumps(rb_jobs.autotune_workload(CFG, model_source(wc.model)), sort_keys=True),
        batch_sizes=",".join(map(str, CFG["autotune"]["batch_sizes"])),
        model_dir=lambda wc: model_dir(wc.model),
        cache=CFG["cache_dir"] or "",
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
        "--workload {params.workload:q} --batch-sizes {params.batch_sizes} --cache-dir '{params.cache}' "
        "--out {output} > {log} 2>&1"


# Where a flex decode step's time goes (decode_profile.enabled), per model, with the options flex jobs replay.
# A job of its own rather than a field of the autotune record that every flex job reads: an edit to the
# diagnostic re-runs this job and its table alone.
rule decode_profile:
    input:
        model=model_input,
        autotune=lambda wc: [f"results/autotune/{wc.model}/decode_opts.json"] if CFG["autotune"]["enabled"] else [],
        code=code("pipeline.cli:_decode_profile", "host.gpu_lease"),
    output:
        "results/decode_profile/{model}/decode_step.json",
    params:
        workload=lambda wc: json.dumps(rb_jobs.autotune_workload(CFG, model_source(wc.model)), sort_keys=True),
        batch_sizes=",".join(map(str, CFG["decode_profile"]["batch_sizes"])),
        model_dir=lambda wc: model_dir(wc.model),
        cache=CFG["cache_dir"] or "",
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
        "--cache-dir '{params.cache}' --out {output} > {log} 2>&1"
