"""What every layer reads: the workload's terms and a result's record (the bottom layer; imports nothing above).

    workload   Sampling, GenSpec, LoRA targets: what a cell runs
    stats      the stats contract (workflow/schemas/stats.schema.json): a record's common fields, load, validate
    envinfo    hardware, package versions, the git commit: what every record states
    atomic     whole-or-nothing writes (a crash never leaves a half-written result)
"""
