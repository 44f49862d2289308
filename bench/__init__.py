"""Benchmark helpers for specconsole.

``bench.synthetic_models`` writes a synthetic EAGLE-3 target/draft pair whose greedy output and
speculative acceptance are known in advance (design: ``shared/design/synthetic-models.md``);
``bench.reference_forward`` is a pure-torch re-implementation of SGLang 0.5.12's Llama / EAGLE-3
math used to check that pair on CPU; ``bench.margin_check`` measures its bf16 logit margins.
"""
