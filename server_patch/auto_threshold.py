"""Auto threshold: speculation on or off per decode batch from the server's own measurements.

Pure policy (no SGLang, no torch), fed by the scheduler hooks.

**The decision.** For a decode batch of ``b`` requests, speculation is on when its expected
output rate is higher::

    ON:  b * A(b) / t_on(b)  tok/s        OFF:  b / t_off(b)  tok/s

``t_on(b)``, ``t_off(b)``: the scheduler's own per-iteration time (s) of decode batches of that
size with speculation on / off -- the time between the results of two consecutive decode batches
(``time.perf_counter`` after each result is processed), kept only inside a run of three decode
batches of one mode (:class:`StepTimer`: under the overlap scheduler that period holds the next
batch's launch, so a prefill next would be charged to a decode step) and without a sampled proof
check in it (``proof.note_check``: a check waits for the GPU). It is the period the
server really produces tokens at, GPU- or CPU-bound. ``A(b)``: the accept length (tokens per
request per ON step: accepted drafts + the bonus token, from SGLang's ``update_spec_metrics``)
measured live, per bucket while that bucket runs ON, else the accept length of the last ~256
request-steps ON (:meth:`StepCosts.accept_for`: it follows the draft and the prompt mix, not the batch
size, so a draft that got worse at the sizes running now also lowers the ON estimates of sizes
not running now; a bucket's own figure is damped against the draws' noise and shrunk toward that
one for its first draws). Both per batch-size bucket (BUCKET_EDGES), as exponential moving averages that
forget old samples (weight ``ALPHA`` per sample), so a change of draft quality or prompt mix is
followed. The comparison is the one of ``shared/design/auto-threshold-anchors.md``: speculate
iff ``A(b) > t_on(b) / t_off(b)``.

**One crossover.** Speculation pays less as the batch grows, so the decision is a threshold:
speculation off from the crossover up. Every SYNC_EVERY decode steps the crossover is fitted to
all buckets measured both ways (:func:`vote`, :func:`fit_crossover`): each votes with its ratio
of ON to OFF tok/s (clipped to LOG_CLIP, none within MARGIN), weighted by its samples; a tie
between two crossovers keeps speculation on. A noisy
bucket (an H200 run on variable-length traffic measured ON at 149 tok/s at batch 1 and OFF at
2,642 at 48-63, both several times off) is outvoted instead of flipping speculation at one size.

**Exploration.** Both modes must be measured at the batch sizes that occur. A bucket whose
other mode has fewer than MIN_SAMPLES samples, or none newer than STALE_STEPS decode steps, is
probed: PROBE_LEN decode steps in the other mode, at most once every PROBE_GAP decode steps per
bucket, and never more than PROBE_SHARE of all decode steps' time (plus PROBE_ALLOWANCE steps to
learn at startup): each probe step is charged its step time over the preferred mode's there
(:func:`probe_cost`, at least 1, at most PROBE_COST_MAX), so probes take at most PROBE_SHARE of the
decode steps and of the decode time. Charged by steps alone, ON probes of the p = 0.5 draft at
16-23 requests on the H100 (an ON step 2.7x an OFF step's time) took 5.6% of the steps of the
benchmark's second row and ~15% of its time (simulated: 0.965x the better static mode; charged
by time 0.989x). In the two buckets at and just below the crossover ON goes stale after
NEAR_STALE_STEPS: the band keeps them off, so a draft that got better shows only in ON probes. A
probe of the worse mode costs at most (its deficit) x PROBE_SHARE of throughput.
A mode never measured in a bucket is probed every LEARN_GAP steps for its first LEARN_PROBES
probes (learning in tens of steps, not hundreds; OFF probes within the server's first
``contract.PROOF_FIRST`` OFF steps do not count: the run-time proofs check those, so they measure
nothing); a bucket whose ratio is beyond LOG_CLIP
re-measures its losing mode DECISIVE_STALE times less often (at 128 requests an ON step of the
8B-shaped pair costs two OFF steps' time, so its probes cost twice their share of steps). Since
speculation pays less as the batch grows, a bucket beyond one that is ahead for its mode by
IMPLY_RATIO (with IMPLY_SAMPLES samples each way) -- larger than such an OFF bucket, smaller than
such an ON one -- is settled by it: it never probes a mode it has not measured (on the H200,
2026-12-02, each new size at 128 requests spent its first probes ON at half the speed of OFF
although 64 had shown OFF 1.8x ahead).

**Stability.** The crossover moves only when another fits the votes better by STICK; speculation
comes back on no sooner than DWELL decode steps after a switch and not in the bucket just below
the crossover within BAND_HOLD steps of it (a hysteresis band: a switch on costs a resume step, a
switch off nothing: :class:`AutoPolicy`), so a batch size hovering at the crossover cannot flip it
every step (vLLM's dynamic speculation lost up to 10x throughput that way: vLLM issue 49548).

**Prefills (opt-in, ``SPECCONSOLE_AUTO_PREFILL=1``).** The step times above are decode steps only
(a period with a prefill in it is never a sample), but a prefill costs the two modes differently:
an ON server's runs the draft over the prompt and drafts its first tokens, an OFF one's writes only
the draft's K/V (h100-2026-12-08, 8B pair: ~7 ms against ~3.3-4.3 ms a prefill). Where requests
arrive often that moves the crossover. :class:`PrefillCosts` measures, per mode, what a period
holding one prefill costs beyond the decode step's estimate there (an EMA), and the prefills per
second of wall time; with it on, each mode's rate is scaled by the share of a second its prefills
leave to decode steps::

    ON:  b * A(b) / t_on(b) * (1 - r * P_on)        OFF:  b / t_off(b) * (1 - r * P_off)

``r``: prefill batches per second, ``P_on``, ``P_off``: a prefill's cost in each mode (s), both
modes measured MIN_SAMPLES times first (until then neither is scaled).

**TP ranks decide alike.** Step times differ a little between TP ranks, so only TP rank 0's
estimates count: every SYNC_EVERY decode steps rank 0 computes the :class:`Table` (the crossover
and, per bucket, whether a mode needs a probe) and the scheduler hooks broadcast it on the TP
CPU group; between syncs each rank decides from that shared table, the batch size and the decode
step count alone (:meth:`AutoPolicy.decide` is deterministic), so every rank takes the same
decision at every step (``decisions_digest`` in ``spec_gate.ranks`` proves it).
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from typing import Any, Dict, List, Optional, Tuple

from server_patch import contract

#: lower edges of the batch-size buckets (req): bucket i holds sizes [edge_i, edge_{i+1})
BUCKET_EDGES: Tuple[int, ...] = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384,
                                 512, 768, 1024, 1536, 2048)
ALPHA = 0.2  # EMA weight of a new sample (~the last 10 samples count)
MIN_SAMPLES = 4  # samples of a mode in a bucket before its estimate is used
STALE_STEPS = 2_048  # decode steps after which a mode's estimate in a bucket is re-measured
NEAR_STALE_STEPS = 512  # ... ON's, in the two buckets at and just below the crossover
PROBE_LEN = 8  # decode steps of one probe (the first one or two are transitions, not samples)
PROBE_GAP = 256  # decode steps between two probes of one bucket
LEARN_GAP = 2 * 8  # ... while the probed mode was never measured there (2 x PROBE_LEN), for
LEARN_PROBES = 4  # ... that many probes (a size the batch only passes through may never fill up)
PROBE_SHARE = 0.01  # probes use at most this share of all decode steps' time (steps x probe_cost) ...
PROBE_ALLOWANCE = 256  # ... plus this many steps to learn at startup
PROBE_COST_MAX = 8.0  # a probe step is charged at most this many steps of the preferred mode's time
MARGIN = contract.AUTO_MARGIN  # within it the two modes tie: the bucket does not vote
DWELL = 32  # decode steps after a switch before speculation may come back on
BAND_FROM = 4  # the bucket below the crossover keeps OFF on (a hysteresis band) from this size up ...
BAND_HOLD = 256  # ... for this many decode steps after the last switch (a batch that stays there goes ON)
SYNC_EVERY = 64  # decode steps between two tables (and their broadcast at TP > 1)
OUTLIER = 4.0  # a step time this many times the estimate is dropped (a GC pause, a stall)
LOG_CLIP = math.log(1.5)  # a bucket's vote counts a ratio of ON to OFF tok/s up to 1.5x either way
VOTE_CAP = 64  # ... weighted by its fewer-measured mode's samples, up to this many
STICK = 0.02  # the crossover moves when another fits the votes better by this share of their weight
DECISIVE_STALE = 4  # a bucket beyond LOG_CLIP re-measures its losing mode this many times less often
ACCEPT_STALE = 4 * 64  # a bucket's accept length older than this (decode steps) than the newest yields to it
ACCEPT_ALPHA_PER_REQUEST = 1 / 256  # ... to this one, a mean over the last ~256 request-steps
BUCKET_ACCEPT_REQUESTS = 64  # a bucket's own accept length: a fast EMA over >= ~64 request-steps ...
ACCEPT_SLOW_REQUESTS = 512  # ... and a slow one over ~512, used while the fast one is within
ACCEPT_SHIFT = 0.15  # ... this share of it (a changed draft or prompt mix moves it further) ...
ACCEPT_PRIOR_REQUESTS = 256  # ... shrunk toward the recent accept length, worth this many request-steps
IMPLY_RATIO = math.log(1.15)  # a bucket this far ahead for one mode settles the buckets beyond it ...
IMPLY_SAMPLES = 8  # ... once it has this many samples of each mode
PREFILL_ENV_SWITCH = "SPECCONSOLE_AUTO_PREFILL"  # 1: the rates charge each mode its prefills (off by default)
PREFILL_ALPHA = 0.05  # EMA weight of one prefill's cost (prompt lengths vary: ~the last 40 count)
PREFILL_OUTLIER = 10.0  # a period this many times the decode step's estimate is no prefill cost (idle between)
RATE_DECAY = 1 - 1 / 512  # the prefill rate's window: ~the last 512 decode results
RATE_PERIOD_MAX_S = 1.0  # a longer period (an idle server) counts this much toward the prefill rate
DECODE_SHARE_MIN = 0.5  # a mode's share of a second left to decode steps is taken as at least this


def bucket_of(batch_size: int) -> int:
    """Index of the bucket of ``batch_size`` (req, >= 1) in BUCKET_EDGES."""
    return max(0, bisect.bisect_right(BUCKET_EDGES, batch_size) - 1)


def nearest_edge(batch_size: int) -> int:
    """The index of the bucket edge (BUCKET_EDGES) nearest ``batch_size`` (a tie: the higher edge,
    so speculation stays on where it was): a manual N as a crossover, which lies on edges."""
    above = bisect.bisect_left(BUCKET_EDGES, batch_size)
    if above >= len(BUCKET_EDGES):
        return len(BUCKET_EDGES) - 1
    if above == 0 or BUCKET_EDGES[above] - batch_size <= batch_size - BUCKET_EDGES[above - 1]:
        return above
    return above - 1


def bucket_range(index: int) -> Tuple[int, Optional[int]]:
    """``(lowest, highest)`` batch size of bucket ``index`` (highest None for the last)."""
    hi = BUCKET_EDGES[index + 1] - 1 if index + 1 < len(BUCKET_EDGES) else None
    return BUCKET_EDGES[index], hi


@dataclasses.dataclass
class Ema:
    """An exponential moving average with its sample count and the decode step of its last sample."""

    value: Optional[float] = None
    count: int = 0
    last_step: int = -1
    requests: int = 0  # draws behind the samples of :meth:`add_requests` (request-steps)

    def add(self, x: float, step: int, alpha: float = ALPHA) -> None:
        """One sample ``x`` at decode step ``step``."""
        self.value = x if self.value is None else (1 - alpha) * self.value + alpha * x
        self.count += 1
        self.last_step = step

    def add_requests(self, x: float, step: int, requests: int, per_request: float, cap: float = 1.0) -> None:
        """One sample ``x`` that is the mean over ``requests`` draws (an accept length over a batch):
        weighted as that many samples of EMA weight ``per_request`` each, at most ``cap``, and the
        plain mean while there are fewer samples than that weight implies."""
        alpha = min(cap, 1 - (1 - per_request) ** requests)
        self.add(x, step, alpha=max(alpha, 1 / (self.count + 1)))
        self.requests += requests

    def fresh(self, step: int, stale_steps: int = STALE_STEPS) -> bool:
        """Enough samples, the last one at most ``stale_steps`` before decode step ``step``."""
        return self.count >= MIN_SAMPLES and step - self.last_step <= stale_steps


@dataclasses.dataclass
class BucketCosts:
    """One bucket's estimates: step time ON and OFF (s), accept length ON (tok/req/step: a fast
    and a slow EMA, :meth:`StepCosts.accept_for`)."""

    t_on: Ema = dataclasses.field(default_factory=Ema)
    t_off: Ema = dataclasses.field(default_factory=Ema)
    accept: Ema = dataclasses.field(default_factory=Ema)
    accept_slow: Ema = dataclasses.field(default_factory=Ema)

    def rates(self, batch_size: float, accept: Optional[float] = None,
              shares: Tuple[float, float] = (1.0, 1.0)) -> Tuple[Optional[float], Optional[float]]:
        """Expected output tok/s ``(ON, OFF)`` at ``batch_size`` (None where not measured), with
        ``accept`` (tok/req/step; default: this bucket's own estimate) as the accept length and
        ``shares`` the share of a second each mode leaves to decode steps (:meth:`PrefillCosts.shares`)."""
        on = off = None
        accept = accept if accept is not None else self.accept.value
        if self.t_on.value and accept:
            on = batch_size * accept / self.t_on.value * shares[0]
        if self.t_off.value:
            off = batch_size / self.t_off.value * shares[1]
        return on, off


class StepCosts:
    """The estimator: per-bucket EMAs of t_on, t_off and A from the server's decode steps."""

    def __init__(self, prefill_aware: bool = False) -> None:
        self.buckets: Dict[int, BucketCosts] = {}
        # the accept length over every ON sample, whatever its batch size, each request-step one
        # sample (a step at batch 1 is one request's 1 to num_steps + 1 tokens, as noisy as that);
        # the plain mean of the first samples
        self.accept = Ema()
        self.prefill = PrefillCosts()  # measured always; charged to the rates when prefill_aware
        self.prefill_aware = prefill_aware

    def shares(self) -> Tuple[float, float]:
        """``(ON, OFF)``: the share of a second each mode leaves to decode steps, as the rates
        charge it (``(1, 1)`` unless prefill-aware: :class:`PrefillCosts`)."""
        return self.prefill.shares() if self.prefill_aware else (1.0, 1.0)

    def accept_for(self, index: int) -> Optional[float]:
        """The accept length to rate bucket ``index``'s ON mode with: its own estimate while it is
        at most ACCEPT_STALE decode steps older than the newest ON sample anywhere, else the
        accept length of all recent ON samples. The accept length follows the draft and the
        prompt mix far more than the batch size, so a draft that got worse (or better) at the
        sizes running now moves the ON estimates of the sizes not running too (SGLang's greedy
        acceptance does not depend on the batch).

        One request's accept per step is 1 to num_steps + 1 tokens (a standard deviation of ~1 token
        at p = 0.5), so a bucket's fast EMA (~64 request-steps) scatters ~7%: more than the margin
        of a near tie (h100-2026-12-06g, 4 requests: ON ~6% ahead, a low stretch put it 10% behind
        and speculation went off for 6 s of the row). The bucket's own value is therefore the slow
        EMA (~512 request-steps) while the fast one is within ACCEPT_SHIFT of it, the fast one once
        it is not (a changed draft or prompt mix is still followed at the fast EMA's speed); and
        it is shrunk toward the recent accept length by its draws ``n``:
        ``(n * own + ACCEPT_PRIOR_REQUESTS * recent) / (n + ACCEPT_PRIOR_REQUESTS)`` (the
        posterior mean of a normal mean with the recent accept length as a prior worth
        ACCEPT_PRIOR_REQUESTS draws), so a bucket's first few draws cannot flip it."""
        b = self.buckets.get(index)
        if b is None or b.accept.value is None:
            return None
        if self.accept.last_step - b.accept.last_step > ACCEPT_STALE:
            return self.accept.value
        if self.accept.value is None:
            return b.accept.value
        own = b.accept.value
        slow = b.accept_slow.value
        if slow is not None and abs(own - slow) <= ACCEPT_SHIFT * slow:
            own = slow
        n = b.accept.requests
        return (n * own + ACCEPT_PRIOR_REQUESTS * self.accept.value) / (n + ACCEPT_PRIOR_REQUESTS)

    def add(self, batch_size: int, on: bool, step_time_s: float, tokens: int, step: int) -> bool:
        """One decode batch of ``batch_size`` requests that ran ``on`` (speculation) in
        ``step_time_s`` seconds and produced ``tokens`` output tokens, at decode step ``step``.
        Returns False for a sample it dropped (empty, non-positive time, an outlier)."""
        if batch_size < 1 or not step_time_s > 0:
            return False
        b = self.buckets.setdefault(bucket_of(batch_size), BucketCosts())
        t = b.t_on if on else b.t_off
        if t.count >= MIN_SAMPLES and t.value is not None and step_time_s > OUTLIER * t.value:
            return False
        t.add(step_time_s, step)
        if on:
            # one step's accept length is the mean of batch_size requests' 1..num_steps+1 tokens:
            # at batch 1 that is one draw, so small batches weigh by their requests, not per step
            b.accept.add_requests(tokens / batch_size, step, batch_size, 1 / BUCKET_ACCEPT_REQUESTS, cap=ALPHA)
            b.accept_slow.add_requests(tokens / batch_size, step, batch_size, 1 / ACCEPT_SLOW_REQUESTS, cap=ALPHA)
            self.accept.add_requests(tokens / batch_size, step, batch_size, ACCEPT_ALPHA_PER_REQUEST)
        return True

    def bucket(self, batch_size: int) -> Optional[BucketCosts]:
        """The estimates of ``batch_size``'s bucket, or None before any sample there."""
        return self.buckets.get(bucket_of(batch_size))


@dataclasses.dataclass(frozen=True)
class StepSample:
    """One usable measurement: a decode batch of ``batch_size`` requests ran ``on`` (speculation)
    in ``step_time_s`` seconds and produced ``tokens`` output tokens (None: not known)."""

    batch_size: int
    on: bool
    step_time_s: float
    tokens: Optional[int] = None


class StepTimer:
    """Turns the moments decode results are processed into step-time samples.

    Batch k's step time is the time from the previous decode result to its own. Under the overlap
    scheduler that period also holds the launch of batch k+1 (SGLang's ``event_loop_overlap``
    processes k's result after launching k+1), so a prefill launched next -- seconds of CPU for a
    long prompt -- would be charged to k. A sample is therefore kept only when batches k-1, k and
    k+1 were decode batches in a row (``forward_iter`` contiguous) that ran the same way
    (``kind``: ``on``, ``off``, or ``resume`` -- the full OFF step before the first ON step after
    OFF steps, never a sample); it comes out when k+1's result is observed. A period in which a
    sampled run-time proof ran (``clean`` False: it waited for the GPU, maybe ran a reference
    forward) gives no sample either, without breaking the run: its neighbours still count.
    """

    def __init__(self) -> None:
        self._last: Optional[Tuple[Optional[int], str, float]] = None
        self._pending: Optional[Tuple[int, StepSample]] = None  # (forward_iter, sample) awaiting k+1

    def observe(self, forward_iter: Optional[int], kind: str, now_s: float, batch_size: int,
                tokens: Optional[int] = None, clean: bool = True) -> Optional[StepSample]:
        """The result of batch ``forward_iter`` (``batch_size`` requests, ``tokens`` output tokens)
        that ran as ``kind`` was processed at ``now_s`` (s); ``clean``: no proof check ran since
        the previous result. Returns the previous batch's sample when this batch confirms it (see
        the class)."""
        prev, self._last = self._last, (forward_iter, kind, now_s)
        pending, self._pending = self._pending, None
        if prev is None or forward_iter is None or prev[0] is None or forward_iter != prev[0] + 1:
            return None
        if kind != prev[1] or kind == "resume":
            return None
        if clean:
            self._pending = (forward_iter, StepSample(batch_size, kind == "on", now_s - prev[2], tokens))
        if pending is not None and pending[0] + 1 == forward_iter and pending[1].on == (kind == "on"):
            return pending[1]
        return None


class PrefillCosts:
    """What a prefill costs each mode beyond its decode steps, and how many come a second.

    Fed every decode result (:meth:`observe`, the same moments as :class:`StepTimer`): the period
    since the previous decode result counts toward the prefill rate (the batches between the two
    results, at most RATE_PERIOD_MAX_S of the period: an idle server's wait is not a second without
    prefills so much as no load), and a period of one mode with exactly one batch between (a prefill)
    and no proof check in it gives that mode a cost sample: the period less the decode step's
    estimate of its bucket and mode (measured MIN_SAMPLES times), unless the period is
    PREFILL_OUTLIER times that estimate (the server sat idle between). Source of the need:
    h100-2026-12-08's trace (``bench.auto_trace``, ``one_prefill_between``).
    """

    def __init__(self) -> None:
        self.on = Ema()
        self.off = Ema()
        self._last: Optional[Tuple[Optional[int], str, float]] = None
        self._batches = 0.0  # decayed count of the batches between decode results (prefills)
        self._seconds = 0.0  # decayed seconds they came in

    def observe(self, forward_iter: Optional[int], kind: str, now_s: float, batch_size: int, clean: bool,
                costs: "StepCosts", step: int) -> None:
        """The result of decode batch ``forward_iter`` (``batch_size`` requests, run as ``kind``:
        ``on``, ``off`` or ``resume``) was processed at ``now_s`` (s); ``clean``: no proof check ran
        since the previous result; ``costs``: the decode-step estimates; ``step``: the decode step."""
        prev, self._last = self._last, (forward_iter, kind, now_s)
        if prev is None or forward_iter is None or prev[0] is None:
            return
        gap, period = forward_iter - prev[0], now_s - prev[2]
        if gap < 1 or not period > 0:
            return
        self._batches = self._batches * RATE_DECAY + (gap - 1)
        self._seconds = self._seconds * RATE_DECAY + min(period, RATE_PERIOD_MAX_S)
        if gap != 2 or kind != prev[1] or kind not in ("on", "off") or not clean:
            return
        b = costs.bucket(batch_size)
        t = None if b is None else b.t_on if kind == "on" else b.t_off
        if t is None or t.count < MIN_SAMPLES or not t.value or period > PREFILL_OUTLIER * t.value:
            return
        (self.on if kind == "on" else self.off).add(max(0.0, period - t.value), step, alpha=PREFILL_ALPHA)

    def per_s(self) -> float:
        """Prefill batches per second over the recent decode results (0 before any)."""
        return self._batches / self._seconds if self._seconds > 0 else 0.0

    def shares(self) -> Tuple[float, float]:
        """``(ON, OFF)``: ``1 - per_s() * P`` for each mode's prefill cost ``P`` (s), at least
        DECODE_SHARE_MIN; ``(1, 1)`` until both modes have MIN_SAMPLES cost samples (charging one
        mode alone would favour the other)."""
        if min(self.on.count, self.off.count) < MIN_SAMPLES or self.on.value is None or self.off.value is None:
            return 1.0, 1.0
        rate = self.per_s()
        return (max(DECODE_SHARE_MIN, 1 - rate * self.on.value), max(DECODE_SHARE_MIN, 1 - rate * self.off.value))


@dataclasses.dataclass(frozen=True)
class Entry:
    """One bucket of the table: ``on`` (speculation preferred there), ``probe``: the mode that
    still needs measuring there (True ON, False OFF, None: both are measured), ``learning``: that
    mode has fewer than MIN_SAMPLES samples there (its first LEARN_PROBES probes come every
    LEARN_GAP decode steps, not PROBE_GAP, within the same budget), ``implied``: its mode is
    settled by another bucket, a smaller one where OFF is ahead by IMPLY_RATIO or more (for OFF)
    or a larger one where ON is (for ON), so it never probes a mode it has not measured
    (:func:`build_table`)."""

    on: bool
    probe: Optional[bool] = None
    learning: bool = False  # the probed mode was never measured here: probe again soon
    implied: bool = False
    cost: float = 1.0  # a probe step's charge against the budget (:func:`probe_cost`)

@dataclasses.dataclass(frozen=True)
class Table:
    """What every TP rank decides from (rank 0's estimates): ``cross``, the bucket index from
    which speculation is off (None: on at every size), and per measured bucket its :class:`Entry`."""

    entries: Tuple[Tuple[int, Entry], ...] = ()
    cross: Optional[int] = None

    def get(self, index: int) -> Optional[Entry]:
        """The entry of bucket ``index``, or None when it has no estimate yet."""
        for i, e in self.entries:
            if i == index:
                return e
        return None

    def preferred(self, index: int) -> bool:
        """Speculation on for bucket ``index``: below the crossover."""
        return self.cross is None or index < self.cross

    def to_wire(self) -> Tuple[Optional[int], List[Tuple[Any, ...]]]:
        """A compact, picklable form for the TP broadcast: ``(cross, [(index, on, probe,
        learning, implied, cost), ...])``."""
        return self.cross, [(i, e.on, e.probe, e.learning, e.implied, e.cost) for i, e in self.entries]

    @classmethod
    def from_wire(cls, data: Tuple[Optional[int], List[Tuple[Any, ...]]]) -> "Table":
        """The table :meth:`to_wire` sent (entries without ``implied`` read as not implied, without
        ``cost`` as cost 1)."""
        cross, entries = data
        return cls(tuple((int(e[0]), Entry(bool(e[1]), None if e[2] is None else bool(e[2]), bool(e[3]),
                                           bool(e[4]) if len(e) > 4 else False,
                                           float(e[5]) if len(e) > 5 else 1.0))
                         for e in entries), None if cross is None else int(cross))


def log_ratio(b: BucketCosts, index: int, accept: Optional[float] = None,
              shares: Tuple[float, float] = (1.0, 1.0)) -> Optional[float]:
    """``ln(ON tok/s / OFF tok/s)`` at the middle of bucket ``index`` (with ``accept`` as the
    accept length: :meth:`StepCosts.accept_for`; default the bucket's own), or None while a mode
    has fewer than MIN_SAMPLES samples there. An estimate that went stale still counts (probes
    refresh it; forgetting it would leave the sizes it covers to the neighbours). ``shares``:
    :meth:`StepCosts.shares`."""
    if min(b.t_on.count, b.accept.count, b.t_off.count) < MIN_SAMPLES:
        return None
    lo, hi = bucket_range(index)
    on_rate, off_rate = b.rates((lo + hi) / 2 if hi is not None else lo, accept, shares)
    if not on_rate or not off_rate:
        return None
    return math.log(on_rate / off_rate)


def vote(b: BucketCosts, index: int, accept: Optional[float] = None,
         shares: Tuple[float, float] = (1.0, 1.0)) -> float:
    """Bucket ``index``'s say in the crossover: positive for speculation,
    ``w * clip(ln(ON tok/s / OFF tok/s), +-LOG_CLIP)`` with ``w`` its fewer-measured mode's
    samples up to VOTE_CAP; 0 while a mode is not measured (:func:`log_ratio`) or the two are
    within MARGIN."""
    ratio = log_ratio(b, index, accept, shares)
    if ratio is None or abs(ratio) < math.log(1 + MARGIN):
        return 0.0
    weight = min(b.t_on.count, b.t_off.count, VOTE_CAP)
    return weight * max(-LOG_CLIP, min(LOG_CLIP, ratio))


def fit_crossover(votes: Dict[int, float], previous: Optional[int]) -> Tuple[Optional[int], bool]:
    """The measured bucket index from which speculation is off that agrees best with the
    ``votes`` (bucket index -> :func:`vote`, every bucket measured both ways), and whether it
    replaces ``previous``. It maximises (votes for ON below it) - (votes for ON at and above it),
    i.e. the prefix sum of the votes; candidates are the measured buckets (speculation off from
    there) and None (on everywhere); of candidates that fit equally (a bucket between them whose
    modes tie within MARGIN casts no vote) the higher wins, so a tie keeps speculation on, as
    SGLang starts and as :func:`boundary` breaks its ties (taking the lower one ran 4-5 requests
    OFF with ON 2.5% ahead on the H100, h100-2026-12-07b, and a batch dipping to 3 whenever a
    request finished switched back on and off). The ``previous`` crossover stays unless another is
    better by STICK of all the votes' weight, so noise cannot move it every table. One exception:
    when the crossover's own bucket has come to a tie (no vote), the bucket above it is measured
    too and nothing fits better, the crossover moves up to that bucket, so the tied one runs ON as
    a tie does in a fresh fit. Held at its old place, such a crossover kept 4-5 requests OFF for
    three minutes on h100-2026-12-07d (estimates ON 633 vs OFF 615-648 tok/s; always 4% ahead of
    none in the same rows), and every dip to 3 switched speculation on and off again (46 switches
    in one row, 0.946x the better static mode). Only to a measured neighbour: a tie at 8 beside 64
    as the next measured size would put the crossover at 32 on no measurement of 12-63 (and
    :func:`boundary`, recomputed at every move, sends sizes not yet measured to the nearer side)."""
    measured = sorted(votes)
    def prefix(c: Optional[int]) -> float:
        return sum(v for i, v in votes.items() if c is None or i < c)
    def height(c: Optional[int]) -> int:
        return len(BUCKET_EDGES) if c is None else c
    best = max([*measured, None], key=lambda c: (prefix(c), height(c)))
    # a previous crossover between measured buckets scores as the next measured one up
    same = None if previous is None else next((i for i in measured if i >= previous), None)
    if prefix(best) > prefix(same) + STICK * sum(abs(v) for v in votes.values()):
        return best, True
    if (same is not None and votes[same] == 0.0 and same + 1 in votes and height(best) > same
            and prefix(best) >= prefix(same)):
        return same + 1, True
    return best, False


def boundary(fitted: Optional[int], measured: List[int]) -> Optional[int]:
    """The bucket index from which speculation is off, given the fitted measured bucket (None: on
    everywhere): the buckets not measured between the last ON bucket and ``fitted`` take the mode
    of the nearer one (a tie stays on); below the lowest measured bucket speculation stays on
    (it pays more as the batch shrinks, so a bucket measured OFF says nothing of smaller ones:
    they run on, as SGLang starts, and their OFF side is probed when they occur). Switched to
    auto from a manual N, only the hysteresis band below N had been measured both ways: OFF there
    had sent every smaller size OFF at the first table."""
    if fitted is None:
        return None
    below = [i for i in measured if i < fitted]
    if not below:
        return fitted
    last_on = max(below)
    return next(i for i in range(last_on + 1, fitted + 1) if i - last_on > fitted - i)


def probe_cost(costs: StepCosts, index: int, probe_on: bool) -> float:
    """What one probe step in bucket ``index`` is charged against the probe budget, in steps of
    the preferred mode: the probed mode's step time over the other's (``t_on / t_off`` for an ON
    probe), from the nearest bucket (this one first, a tie: the smaller) with both step times
    measured (MIN_SAMPLES each), rounded to 0.01 (rank 0 computes it and broadcasts it with the
    table); at least 1 (a probe of the faster mode still costs its steps: it is the worse mode
    there), at most PROBE_COST_MAX; 1 while no bucket is measured both ways."""
    both = sorted((abs(i - index), i) for i, b in costs.buckets.items()
                  if b.t_on.count >= MIN_SAMPLES and b.t_off.count >= MIN_SAMPLES and b.t_on.value and b.t_off.value)
    if not both:
        return 1.0
    b = costs.buckets[both[0][1]]
    ratio = b.t_on.value / b.t_off.value if probe_on else b.t_off.value / b.t_on.value
    return min(PROBE_COST_MAX, max(1.0, round(ratio, 2)))


def build_table(costs: StepCosts, previous: Table, step: int) -> Table:
    """The table from the estimates at decode step ``step``.

    Speculation pays less as the batch grows (verifying ``num_draft_tokens`` per request turns
    the step compute-bound), so the table is one crossover, fitted to every measured bucket's
    :func:`vote` (:func:`fit_crossover`, :func:`boundary`): a single noisy bucket cannot switch
    speculation on in the middle of the OFF range, nor off at batch 1; a size never measured
    between two measured ones takes the mode of the nearer, one below every measured size stays on
    (:func:`boundary`). Before any bucket is measured both ways the crossover is
    the previous one (none at first: speculation on, as SGLang starts). A bucket with a mode not
    measured (fresh) asks for a probe of that mode unless the crossover already runs it there
    (running it measures it); a bucket whose ratio is beyond LOG_CLIP re-measures its losing mode
    only every DECISIVE_STALE x STALE_STEPS (a probe of a mode at half the speed costs twice).
    """
    accepts = {i: costs.accept_for(i) for i in costs.buckets}
    shares = costs.shares()
    ratios = {i: log_ratio(b, i, accepts[i], shares) for i, b in costs.buckets.items()}
    measured = sorted(i for i, r in ratios.items() if r is not None)
    cross = previous.cross
    if measured:
        fitted, moved = fit_crossover({i: vote(costs.buckets[i], i, accepts[i], shares) for i in measured}, previous.cross)
        if moved:
            cross = boundary(fitted, measured)
    table = Table((), cross)
    settled = [i for i in measured if min(costs.buckets[i].t_on.count, costs.buckets[i].t_off.count) >= IMPLY_SAMPLES]
    ahead_on = [i for i in settled if ratios[i] >= IMPLY_RATIO]
    ahead_off = [i for i in settled if ratios[i] <= -IMPLY_RATIO]
    entries = []
    for index in sorted(costs.buckets):
        b = costs.buckets[index]
        on = table.preferred(index)
        r = ratios[index]
        decisive = r is not None and abs(r) >= LOG_CLIP and (r > 0) == on
        # speculation pays less as the batch grows: a bucket beyond one that is clearly ahead for
        # its mode (smaller than such an ON bucket, larger than such an OFF one) is settled by it
        # and never probes a mode it has not measured (that one is measured next door)
        implied = any(i > index for i in ahead_on) if on else any(i < index for i in ahead_off)
        stale = STALE_STEPS * (DECISIVE_STALE if decisive or implied else 1)
        # at and just below the crossover ON is re-measured sooner: OFF keeps the band off, so a draft
        # that got better shows only in ON probes (one that got worse shows in the ON steps running)
        near = cross is not None and index in (cross - 1, cross) and not decisive
        stale_on = NEAR_STALE_STEPS if near else stale
        missing = [mode for mode, known in ((True, b.t_on.fresh(step, stale_on) and b.accept.fresh(step, stale_on)),
                                            (False, b.t_off.fresh(step, stale))) if not known]
        if implied:
            missing = [mode for mode in missing if (b.t_on if mode else b.t_off).count >= MIN_SAMPLES]
        probe = next((mode for mode in missing if mode != on), None)
        learning = probe is not None and (b.t_on if probe else b.t_off).count < MIN_SAMPLES
        cost = probe_cost(costs, index, probe) if probe is not None else 1.0
        entries.append((index, Entry(on, probe, learning, implied, cost)))
    return Table(tuple(entries), cross)


class AutoPolicy:
    """The per-step decision of the auto threshold (identical on every TP rank: it reads only the
    shared :class:`Table`, the batch size and the decode step).

    Speculation goes off as soon as the table prefers it, and comes back on only DWELL decode steps
    or more after the last switch and below the band: the bucket just below the crossover keeps
    OFF on (:meth:`in_band`; a hysteresis, as the manual gate's N / H) for BAND_HOLD decode steps
    after the last switch (a batch that stays in the band, where ON is preferred, then goes ON:
    there the table's ON probes cannot reach it, it runs ON in the table's view). A switch on costs
    a resume step (one more OFF step with the full draft extend: 1 token a request where an ON step
    makes A), a switch off nothing; a batch that dips below the crossover for a step or two, as a
    closed loop's does whenever a request finishes, gains nothing from speculation but pays that
    step. A dwell that held either mode (before 2026-12-06) kept a batch of 32 ON for a third of its
    steps in the simulated closed loop at 32 on the H100 triton curve of that day (crossover 32; ON
    / OFF 1.04 at 24-31, 0.84 at 32-47): 0.942x the better static mode; with the band 0.995x."""

    def __init__(self) -> None:
        self.table = Table()
        self.on = True  # the mode of the last decode batch
        self.last_switch_step = -DWELL  # the decode step of the last switch that was not a probe
        self.probe_left = 0
        self.probe_on: Optional[bool] = None  # the mode of the probe under way (None: none)
        self.resume_mode = True  # the mode the probe interrupted
        self.probe_steps = 0
        self.probe_charge = 0.0  # probe steps weighted by their cost (Entry.cost): what the budget counts
        self.probe_starts: List[int] = []  # decode steps at which probes began
        self.last_probe: Dict[int, int] = {}  # bucket -> decode step its last probe began
        self.probes_of: Dict[int, int] = {}  # bucket -> probes begun there

    def in_band(self, index: int) -> bool:
        """Bucket ``index`` is the hysteresis band: the bucket just below the crossover, from 4
        requests up (below that a batch may have nowhere lower to go)."""
        cross = self.table.cross
        return cross is not None and index == cross - 1 and BUCKET_EDGES[index] >= BAND_FROM

    def decide(self, batch_size: int, step: int, off_steps: Optional[int] = None) -> Tuple[bool, bool]:
        """Mode for decode batch number ``step`` (0-based) of ``batch_size`` requests:
        ``(speculation on, this step belongs to a probe)``. When a probe ends, the mode it
        interrupted is back at once (the dwell holds only the switches the table asked for); that
        step counts as the probe's (its switch back is not a decision), not as a probe step.
        ``off_steps``: OFF steps run so far (rank-identical, as ``step``); an OFF probe begun within
        the first ``contract.PROOF_FIRST`` of them does not count as one of a bucket's LEARN_PROBES:
        the run-time proofs check those steps, so they give no step-time samples (StepTimer)."""
        index = bucket_of(batch_size)
        if self.probe_left > 0:
            self.probe_left -= 1
            self.probe_steps += 1
            self.on = self.probe_on
            return self.on, True
        ending = self.probe_on is not None
        if ending:
            self.probe_on, self.on = None, self.resume_mode
        want = self.table.preferred(index)
        entry = self.table.get(index)
        budget = PROBE_SHARE * step + PROBE_ALLOWANCE
        learning = entry is not None and entry.learning and self.probes_of.get(index, 0) < LEARN_PROBES
        gap = LEARN_GAP if learning else PROBE_GAP
        if (entry is not None and entry.probe is not None and entry.probe != want
                and self.probe_charge + PROBE_LEN * entry.cost <= budget
                and step - self.last_probe.get(index, -gap) >= gap):
            self.last_probe[index] = step
            self.probe_charge += PROBE_LEN * entry.cost
            if entry.probe or off_steps is None or off_steps >= contract.PROOF_FIRST:
                self.probes_of[index] = self.probes_of.get(index, 0) + 1
            self.probe_starts.append(step)
            self.probe_on, self.resume_mode = entry.probe, self.on
            self.probe_left = PROBE_LEN - 1
            self.probe_steps += 1
            self.on = self.probe_on
            return self.on, True
        since = step - self.last_switch_step
        if want and not self.on and (since < DWELL or (since < BAND_HOLD and self.in_band(index))):
            want = False  # back on at most once per DWELL steps, in the band after BAND_HOLD (see the class)
        if want != self.on:
            self.on, self.last_switch_step = want, step
            return want, False
        return want, ending  # back to the interrupted mode: the probe's last switch


def crossover(table: Table) -> Optional[int]:
    """The learned threshold (req): the smallest batch size speculation is off at (None while it
    is on at every size)."""
    return None if table.cross is None else BUCKET_EDGES[table.cross]


def report(costs: StepCosts, table: Table) -> List[Dict[str, Any]]:
    """Per measured bucket, for ``spec_gate.auto_buckets``: its range (req), the estimated output
    tok/s ON and OFF at its middle, the sample counts, the accept length its ON estimate uses
    (:meth:`StepCosts.accept_for`), the preferred mode."""
    out = []
    shares = costs.shares()
    for index in sorted(costs.buckets):
        b = costs.buckets[index]
        lo, hi = bucket_range(index)
        on_rate, off_rate = b.rates((lo + hi) / 2 if hi is not None else lo, costs.accept_for(index), shares)
        entry = table.get(index)
        out.append({
            "lo": lo, "hi": hi,
            "on_tok_s": round(on_rate, 1) if on_rate is not None else None,
            "off_tok_s": round(off_rate, 1) if off_rate is not None else None,
            "on_samples": b.t_on.count, "off_samples": b.t_off.count,
            "accept_length": round(accept, 3) if (accept := costs.accept_for(index)) is not None else None,
            "on": entry.on if entry is not None else None,
        })
    return out
