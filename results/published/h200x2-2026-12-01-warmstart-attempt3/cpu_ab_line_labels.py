"""CPU A/B: does the worked solution's line label ("k left" countdown vs "i of n") change how fast a small
model learns the event lookup? Same problems, tokenizer, model, steps; loss on held-out op/operand tokens."""
import random, sys, time, math, json
import torch
sys.path.insert(0, "/work/main/src")
from rollout_bench.assets import learnable, chat
from transformers import AutoTokenizer, Qwen3Config, Qwen3ForCausalLM
torch.set_num_threads(1)
fmt, secs = sys.argv[1], float(sys.argv[2])

def problem(rng):
    item, place = rng.choice(learnable._ITEMS), rng.choice(learnable._PLACES)
    n = learnable._events(rng); value = rng.randint(2, 99)
    text = [f"A {place} has {value} {item}. Then {n} {'thing happens' if n == 1 else 'things happen'}, in order."]
    work = [f"Start: {value}."]; marks = []
    for i in range(1, n + 1):
        s, line, value = learnable._step(rng, value, item)
        text.append(f"{i}. {s}")
        label = f"{n - i} left" if fmt == "left" else f"{i} of {n}"
        work.append(f"{label}: {line}.")
    text.append(f"How many {item} does the {place} have at the end?")
    worked = "\n".join(work) + f"\n{chat.REASONING_END}{chat.SOLUTION_START}{value}{chat.SOLUTION_END}"
    return "\n".join(text), worked, str(value)

tok = AutoTokenizer.from_pretrained("/tmp/ab/tok")
rng = random.Random(1)
rows = [problem(rng) for _ in range(12000)]
test = [problem(random.Random(10**6 + i)) for i in range(64)]
def enc(p, w):
    pr = tok.apply_chat_template(chat.messages(p), add_generation_prompt=True, tokenize=False)
    a = tok(pr)["input_ids"]; b = tok(w)["input_ids"] + [tok.eos_token_id]
    return a, b
data = [enc(p, w) for p, w, _ in rows]; data = [d for d in data if len(d[0]) + len(d[1]) <= 400]
cfg = Qwen3Config(vocab_size=len(tok), hidden_size=128, intermediate_size=384, num_hidden_layers=4,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=512,
                  tie_word_embeddings=True)
torch.manual_seed(0)
model = Qwen3ForCausalLM(cfg)
opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.0)
def batch(ds):
    L = max(len(a) + len(b) for a, b in ds)
    ids = torch.full((len(ds), L), tok.pad_token_id); lab = torch.full((len(ds), L), -100)
    for i, (a, b) in enumerate(ds):
        ids[i, :len(a) + len(b)] = torch.tensor(a + b); lab[i, len(a):len(a) + len(b)] = torch.tensor(b)
    return ids, lab
t0 = time.time(); step = 0; bs = 16; hist = []
order = random.Random(0)
while time.time() - t0 < secs:
    ds = order.sample(data, bs)
    ids, lab = batch(ds)
    warm = min(1.0, (step + 1) / 50)
    for g in opt.param_groups: g["lr"] = 2e-3 * warm
    loss = model(input_ids=ids, labels=lab).loss
    opt.zero_grad(); loss.backward(); opt.step(); step += 1
    if step % 50 == 0: hist.append((step, round(loss.item(), 3)))
# held-out: teacher-forced loss on all completion tokens, and greedy accuracy
model.eval()
te = [enc(p, w) for p, w, _ in test]
with torch.no_grad():
    ids, lab = batch(te); tl = model(input_ids=ids, labels=lab).loss.item()
    ok = eos = 0
    for (p, w, ans), (a, b) in zip(test[:32], te[:32]):
        out = model.generate(torch.tensor([a]), max_new_tokens=200, do_sample=False, eos_token_id=tok.eos_token_id,
                             pad_token_id=tok.pad_token_id)[0, len(a):].tolist()
        eos += tok.eos_token_id in out
        txt = tok.decode(out, skip_special_tokens=False)
        ok += f"{chat.SOLUTION_START}{ans}{chat.SOLUTION_END}" in txt
print(json.dumps({"fmt": fmt, "steps": step, "secs": secs, "train_loss": hist, "heldout_loss": round(tl, 4),
                  "greedy_acc32": ok / 32, "eos32": eos / 32}))
