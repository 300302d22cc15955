"""The seed's four reward functions score known strings exactly as the seed notebook does."""
import pytest

from rollout_bench.assets import rewards

EOS = "<|endoftext|>"
FUNCS = {f.__name__: f for f in rewards.build(EOS)}


def score(text: str, answer: str) -> dict:
    completions = [[{"role": "assistant", "content": text}]]
    prompts = [[{"role": "user", "content": "q"}]]
    return {name: f(prompts=prompts, completions=completions, answer=[answer])[0] for name, f in FUNCS.items()}


# text, answer -> (match_format_exactly, match_format_approximately, check_answer, check_numbers)
CASES = [
    ("think<end_working_out><SOLUTION>42</SOLUTION>" + EOS, "42", (3.0, 1.5, 5.0, 3.5)),
    ("think<end_working_out><SOLUTION>42</SOLUTION>\n", "42", (3.0, 1.5, 5.0, 3.5)),
    ("<end_working_out><SOLUTION> 42 </SOLUTION>", "42", (3.0, 1.5, 3.5, 3.5)),
    ("<end_working_out><SOLUTION>95</SOLUTION>", "100", (3.0, 1.5, 2.0, -1.5)),
    ("<end_working_out><SOLUTION>85</SOLUTION>", "100", (3.0, 1.5, 1.5, -1.5)),
    ("<end_working_out><SOLUTION>50</SOLUTION>", "100", (3.0, 1.5, -2.5, -1.5)),
    ("<end_working_out><SOLUTION>abc</SOLUTION>", "100", (3.0, 1.5, -4.5, -2.5)),
    ("<end_working_out><SOLUTION>.</SOLUTION>", "5", (3.0, 1.5, -4.5, 0.0)),
    ("<end_working_out><SOLUTION>5</SOLUTION>", "0", (3.0, 1.5, -4.5, -1.5)),
    ("hello world", "42", (0.0, -3.0, -2.0, -2.5)),
    ("<end_working_out><end_working_out><SOLUTION>7</SOLUTION>", "7", (3.0, 0.0, 5.0, 3.5)),
    ("<SOLUTION>1,000</SOLUTION>", "1000", (0.0, 0.0, -2.0, 3.5)),
    ("<end_working_out><SOLUTION>42</SOLUTION> and more text", "42", (0.0, 1.5, -2.0, 3.5)),
    ("<end_working_out><SOLUTION>-3</SOLUTION>", "-3", (3.0, 1.5, 5.0, 3.5)),
]


@pytest.mark.parametrize("text,answer,expected", CASES)
def test_scores_match_the_seed(text, answer, expected):
    got = score(text, answer)
    assert tuple(got[n] for n in ("match_format_exactly", "match_format_approximately",
                                  "check_answer", "check_numbers")) == expected


def test_names_are_the_logged_metric_names():
    assert list(FUNCS) == ["match_format_exactly", "match_format_approximately", "check_answer", "check_numbers"]


def test_eos_is_optional_but_only_once():
    assert score("<end_working_out><SOLUTION>1</SOLUTION>" + EOS + EOS, "1")["match_format_exactly"] == 0.0


def test_plain_string_completions_are_accepted():
    assert FUNCS["match_format_exactly"](completions=["<end_working_out><SOLUTION>1</SOLUTION>"]) == [3.0]


def test_source_hash_is_stable():
    assert rewards.source_sha256() == rewards.source_sha256() and len(rewards.source_sha256()) == 64
