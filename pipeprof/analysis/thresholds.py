"""Every threshold the analysis decides by, in one place (fractions are 0-1).

The verdict's decision table (``pipeprof.analysis.verdict``), the
recommendations' candidates (``pipeprof.analysis.recommend``), the cold-cache
check, the differential diagnosis and the tuner import these; a threshold
used by two of them (the compute-bound data wait, the busy workers) is one
name here, not two numbers there.
"""

from __future__ import annotations

# TensorFlow's input-pipeline analyzer calls a program "highly input-bound" when more than 20% of step time
# waits for input and "not input-bound" under 5%; pipeprof uses the same cut-offs on the data-wait fraction.
INPUT_BOUND_FRACTION = 0.20
COMPUTE_BOUND_FRACTION = 0.05  # under this data wait: compute-bound (R2), and no input change is worth making

# R0: fewer counted steps than this (after warm-up) are too few to judge: no verdict, no recommendations.
MIN_COUNTED_STEPS = 5
# Two sets of steps (cProfile's window against the rest) are compared by their medians only with at least this
# many steps in each: a median of fewer is one stretch of the run (an epoch's drained tail), not its usual step.
MIN_STEPS_TO_COMPARE = 10
# The run itself varies (analysis.variation) when two windows of its counted steps have data waits in different
# degrees of the verdict (compute-bound, partly, input-bound) at least this far apart (a share of step time):
# a window just either side of a cut-off is the uncertain band's business, not the run's variation.
RUN_VARIATION_POINTS = 0.10
H2D_BOUND_FRACTION = 0.20  # R1: the copy to the device takes at least this share (and no less than the wait)
READY_WAIT_MAIN = 0.6  # R5: share of the wait on steps with a batch ready, at or above
READY_WAIT_WORKERS = 0.4  # R6: that share at or below
WORKERS_IDLE_BUSY = 0.5  # R8: workers busy at most this share of their span have slack
# R6 and R8, and the prefetch recommendation: workers busy at least this share of their span set the pace.
WORKERS_BUSY = 0.8
DISK_READ_FLOOR_BYTES_PER_S = 1e6  # R9 and the storage sentence: below this the disk read "next to nothing"

# Uncertain bands (issue 14, item 7): half-widths around the verdict's cut-offs above, in the same units. A
# number inside ``cut ± band`` is too close to the cut-off to decide by itself: the same run measured again
# lands on either side (six identical Lightning runs had their workers busy 0.73-0.80, around WORKERS_BUSY,
# and were called input:main four times and input:prep twice). Inside a band the verdict decides from the
# other evidence (the queue's state, where the wait fell, the per-part costs of making a batch) and, where
# that does not settle it either, names both candidates and says it is uncertain (summary.json's
# ``verdict.uncertain`` and ``verdict.candidates``); its class is then the candidate of the rule that comes
# first in the decision table, whichever side of the cut-off the number fell, so it does not flip.
H2D_BOUND_BAND = 0.03  # R1: h2d share in [0.17, 0.23): h2d or what the rest of the table says
COMPUTE_BOUND_BAND = 0.01  # R2: data wait in [0.04, 0.06): compute or the input's cause
READY_WAIT_BAND = 0.05  # R5/R6/R7: ready share in [0.55, 0.65) and (0.35, 0.45]: either rule or R7
WORKERS_BUSY_BAND = 0.1  # R6/R8: workers busy in [0.7, 0.9): saturated only if the queue agrees
WORKERS_IDLE_BUSY_BAND = 0.05  # R8: workers busy in (0.45, 0.55]: idle or balanced
# R3/R4 and the workers' fetch-vs-CPU split: the largest part of making a batch must exceed the next by at least
# this share of the compared time, else both parts are named.
PART_MARGIN = 0.1
# A queue found full on at least this share of steps was not run dry: the workers were ahead when asked, so no
# sentence may say they "cannot keep up" (one said so beside "72% of steps found the prefetch queue full").
QUEUE_MOSTLY_FULL = 0.5
# R5 trusts "a batch was ready" only if such a step's mean wait was short next to the workers' supply interval
# (batch-making time / num_workers). At or above this share of it, the batch counted in the queue had not
# arrived yet: a worker busy with Python CPU work holds its interpreter, and the queue's feeder thread sends
# the batch late (pure-Python preprocessing in a Lightning run: "ready" steps waited 11 ms against 14 ms a
# batch, and R5 blamed the training process). The workers then set the pace, whatever the queue said.
READY_UNDELIVERED = 0.5
READY_UNDELIVERED_BAND = 0.1  # [0.4, 0.6): either the workers' pace or R5, both named
# The verdict's sentence names waiting for a core from this share of batch-making time (below it, noise).
CORE_WAIT_WORTH_SAYING = 0.02

# Recommendations.
MIN_GAIN = 1.05  # a recommendation must predict at least 5% more samples/s
NEAR_BEST = 0.98  # the smallest worker count within 2% of the best one wins
SATURATED_FRACTION = 0.9  # busy cores over usable cores: no core left for more workers
# Processes outside the job that kept at least this share of the cores busy are named beside the advice.
OTHER_LOAD_WORTH_SAYING = 0.1
BURSTY_EMPTY_FRACTION = 0.3  # the queue found empty on at least this share of steps: supply is bursty
SLOW_EPOCH_START_STEPS = 2.0  # excess wait of an epoch's first step, in median steps: persistent workers
WORKER_START_WORTH_SAYING = 0.05  # spawned workers' start-up, as a share of the script's wall time: named in the verdict
START_WAIT_SHARE = 0.5  # of the counted data wait on the first step of a pass, with spawned workers timed: input:start
SHARE_DOMINATES = 0.5  # a part of batch-making at least this share of it is worth removing
PIN_MEMORY_H2D = 0.05  # h2d share of step time from which pinning is worth suggesting

# The cold-cache check (analysis.cache): a cold epoch must read at least this fraction of the data set from disk.
# Not 1.0: reads in the epoch's last ~1/sample_hz seconds can fall after the sampler's last tick, a new worker's
# first reads go uncounted, and reads are counted in pages while samples straddle them. A warm cache reads next
# to nothing, so 0.8 still separates the two cleanly.
MIN_COLD_READ_FRACTION = 0.8

# The differential diagnosis (analysis.differential): below this total stall the fetch/prep split is not judged:
# a few percent of noisy step time split two ways says nothing.
MIN_STALL_TO_SPLIT = 0.05

# The tuner (analysis.tune): a neighbour must beat the best so far by this share to be taken.
TUNE_MIN_GAIN = 0.03

# Distributed jobs (analysis.ranks). Data-parallel ranks go in lock-step, so the slowest rank's own work per step
# (step time minus its collective wait) sets everyone's pace. A straggler is named only when that own time exceeds
# the other ranks' median by more than this share: identical ranks on one machine differ by a few percent from step
# to step (scheduling, page cache, a worker's turn), and a rank only 10% slower costs the job at most ~10%, which
# is less than the per-rank advice's own model error; below it the answer is "no rank sets the pace" (kind none).
STRAGGLER_MARGIN = 0.10
# ... and only when it is slower step after step: in at least this share of the counted steps (aligned by step, as
# lock-step ranks are) its own time exceeds the other ranks' median of that step. Ranks that differ by chance are
# each the slower about half the time, and a few slow steps (a page-cache miss, a descheduled rank) can lift a mean
# 10 % without the rank being slower at all; a straggler with a slow shard, disk or node is slower nearly always.
STRAGGLER_CONSISTENCY = 0.75
