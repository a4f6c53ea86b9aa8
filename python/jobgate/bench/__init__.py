"""`jobgate bench`: admission latency and throughput of a running service.

- `load`: the load itself: closed loop (a fixed number of calls in flight) or open
  loop (calls sent on a schedule, latency measured from the scheduled send time so
  that queueing is never hidden), on asyncio gRPC clients in one or more processes;
- `results`: what a run measured, merged over processes: an HDR histogram of
  latencies (within 1%), counts by status code, verdict and refusing rule, a
  per-second timeline; and its text, JSON and CSV forms;
- `compare`: two saved runs side by side, with bootstrap intervals over their
  per-second samples;
- `plot`: the latency distribution and latency over time, drawn with matplotlib.
"""
