"""The learn case's flex seed-3407 workload (session.yaml over the gpu profile) with another learning rate."""
import json
import sys

import yaml

from rollout_bench import config

raw = yaml.safe_load(open("config/config.yaml"))
user = yaml.safe_load(open(".carry/session.yaml"))
cfg = config.resolve({**raw, **{k: v for k, v in user.items()}, "profile": "gpu"}, user)
wl = config.train_workload(cfg, "qwen3-small-warm", "flex", 3407)
wl["learning_rate"] = float(sys.argv[1])
print(json.dumps(wl, sort_keys=True))
