# %% [markdown]
# # Lumos from Python: the nanoGPT speedrun traces
#
# A notebook-style script (cells start with `# %%`; VS Code and Jupyter's jupytext run them one by
# one, `python docs/examples/nanogpt_api.py [TRACES]` runs them all). It uses the public API only
# (`lumos_core.open` and what it returns; docs/api.md). The traces are the 8 x H100 modded-nanogpt
# run in `../shared/traces/h100-nanogpt-8rank` (real, third-party: read in place, never copied).
# `to_pandas()` needs pandas (`pip install "lumos[pandas]"`).

# %%
import sys
import tempfile
from pathlib import Path

import lumos_core

REPO = Path(__file__).resolve().parents[2]
TRACES = Path(sys.argv[1]) if len(sys.argv) > 1 else REPO.parent / "shared" / "traces" / "h100-nanogpt-8rank"

# %% [markdown]
# ## Open the job
# Loading parses every rank file (cached afterwards); the execution graph and the baseline
# configuration (what the trace says about DP/TP/PP, model shape and GPU) are built when first used.

# %%
job = lumos_core.open(TRACES)
print(job)
print({k: job.config.as_dict()[k] for k in ("dp", "tp", "pp", "gpu", "layers")})

# %% [markdown]
# ## Replay the traced configuration
# `to_dict()` is what `lumos replay --json` prints; `to_pandas()` has one row per rank and
# iteration. These replayed times are in-sample (the graph is calibrated on the very iterations it
# replays: close to exact by construction), so they check the graph, not a prediction. The hold-out
# accuracy beside its null models is `job.replay(holdout=True).to_dict()["holdout"]` and
# `["null_models"]` (about 15 s on this job, so not run here).

# %%
replay = job.replay(holdout=False)
print(f"replayed iteration {replay.iteration_us / 1000:.2f} ms (in-sample)")
iterations = replay.to_pandas()
print(iterations[["rank", "name", "measured_us", "replayed_us"]].head(8))

# %% [markdown]
# ## Estimate data parallelism 16
# Twice the replicas: the gradient collectives run over 16 GPUs instead of 8 (NCCL model calibrated
# on this trace's own collectives). The baseline replay is computed once per job and reused by every
# estimate and sweep of it.

# %%
dp16 = job.estimate(dp=16)
print(dp16.to_pandas()[["which", "config", "gpus", "iteration_us", "exposed_comm_us"]])
for note in dp16.notes:
    print("note:", note)

# %%
sweep = job.sweep("dp=8,16,32,64")
print(sweep.to_pandas()[["dp", "world_size", "iteration_ms", "exposed_comm_ms", "change_pct"]])

# %% [markdown]
# ## Diff two jobs
# The predicted DP 16 job written as Kineto traces (what `lumos estimate --out` writes) and opened
# like any other job, then compared with the measured one: per kernel family and collective kind,
# as `lumos diff` does.

# %%
with tempfile.TemporaryDirectory() as tmp:
    predicted = lumos_core.open(dp16.export(Path(tmp) / "dp16"), cache=False)
    diff = job.diff(predicted)
print(f"iteration {diff.to_dict()['iteration_delta_pct']:+.2f}% (predicted DP 16 - measured DP 8)")
print(diff.to_pandas("collective_kinds"))

# %% [markdown]
# ## Where the GPUs wait
# Idle time of every GPU stream per iteration, by cause.

# %%
idle = job.idle().to_pandas()
causes = [c for c in idle.columns if c.endswith("_us") and c not in ("idle_us", "window_us")]
print(idle.groupby("rank")[causes].sum().round(1))
