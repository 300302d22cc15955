# Cached stats JSONs -> summary CSV -> tables and charts (reruns alone when its code changes).


rule aggregate_generate:
    input:
        stats=GEN_STATS,
        code=code("report.cli:_aggregate"),
    output:
        "results/summary/generate.csv",
    log:
        "results/logs/report/aggregate_generate.log",
    conda:
        "../envs/report.yaml"
    shell:
        "python -m rollout_bench aggregate --out {output} {input.stats} > {log} 2>&1"


rule render_generate:
    input:
        summary="results/summary/generate.csv",
        code=code("report.cli:_render"),
    output:
        table=report("results/tables/generate.md", caption="../workflow/report/generate_table.rst",
                     category="Generation"),
        batch_html=report("results/charts/tps_vs_batch.html", caption="../workflow/report/tps_vs_batch.rst",
                          category="Generation"),
        batch_svg="results/charts/tps_vs_batch.svg",
        batch_png="results/charts/tps_vs_batch.png",  # written beside the SVG
        mem_html=report("results/charts/tps_vs_memory.html", caption="../workflow/report/tps_vs_memory.rst",
                        category="Generation"),
        mem_svg="results/charts/tps_vs_memory.svg",
        mem_png="results/charts/tps_vs_memory.png",
    params:
        reference=CFG["reference_backend"],
        versus=",".join(CFG["versus"]),
    log:
        "results/logs/report/render_generate.log",
    conda:
        "../envs/report.yaml"
    shell:
        "python -m rollout_bench render --summary {input.summary} --reference {params.reference} "
        "--versus {params.versus} "
        "--table {output.table} --chart-batch-html {output.batch_html} --chart-batch-svg {output.batch_svg} "
        "--chart-memory-html {output.mem_html} --chart-memory-svg {output.mem_svg} > {log} 2>&1"


rule render_decode_profile:
    input:
        records=DECODE_PROFILE_PATHS,
        code=code("report.cli:_render_decode_profile"),
    output:
        report("results/tables/decode_step.md", caption="../workflow/report/decode_step.rst", category="Generation"),
    log:
        "results/logs/report/render_decode_profile.log",
    conda:
        "../envs/report.yaml"
    shell:
        "python -m rollout_bench render-decode-profile --table {output} {input.records} > {log} 2>&1"
