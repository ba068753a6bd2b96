#!/usr/bin/env python3
"""Where the server's threads wait for a CPU during the portal soak.

    cargo bench -p bizrq --bench portal --no-run
    server/benches/sched-delays.sh                      # 90 s soak, 75 s recorded
    server/benches/sched-delays.py perf.txt PID         # on a recording of your own

`perf sched record` (Debian's linux-perf; root) records every switch and
wakeup on the machine while the soak runs; `perf script` turns it into text
and this reads it. For each group of the server's threads (its name without
the trailing number, and its priority: @120 is nice 0, @130 the portal's
nice 10) it prints how long a woken thread waited for a CPU (p50, p99,
max) and who woke it, then the longest waits with what ran on that CPU
meanwhile. A thread at nice 0 woken by the portal's threads
(`bizrq-portal`, `bizrq-render`) is one of the admissions' resources doing
the portal's work: that is how the admissions' SQLite readers were found
serving members' subtree reads (docs/limits.md).
"""
import re, sys, collections
path, pid = sys.argv[1], int(sys.argv[2])
t0 = float(sys.argv[3]) if len(sys.argv) > 3 else 0
t1 = float(sys.argv[4]) if len(sys.argv) > 4 else 1e18
sw = re.compile(r"prev_comm=(.*?) prev_pid=(\d+) prev_prio=(\d+) prev_state=(\S+) ==> next_comm=(.*?) next_pid=(\d+) next_prio=(\d+)")
wk = re.compile(r"comm=(.*?) pid=(\d+) prio=(\d+)")
head = re.compile(r"^\s*(.*?)\s+(\d+)/(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+(\S+):\s+(.*)$")
def group(name):
    return re.sub(r"[-_ ]?\d+$", "", name)
lines = open(path, errors="replace").read().splitlines()
threads = {}
for line in lines:
    m = head.match(line)
    if m and int(m.group(2)) == pid:
        threads[int(m.group(3))] = m.group(1)
woken, running, sleep_since = {}, {}, {}
delays = collections.defaultdict(list)
wakers = collections.defaultdict(collections.Counter)
slept_waker = collections.defaultdict(lambda: collections.defaultdict(float))
long = []
hist = collections.defaultdict(list)
for line in lines:
    m = head.match(line)
    if not m: continue
    comm, p, tid, cpu, t, ev, rest = m.groups()
    p, tid, cpu, t = int(p), int(tid), int(cpu), float(t)
    if ev.startswith("sched:sched_waking") or ev.startswith("sched:sched_wakeup_new"):
        w = wk.search(rest)
        if not w: continue
        wtid = int(w.group(2))
        if wtid not in woken:
            woken[wtid] = (t, comm, p)
            if wtid in threads and wtid in sleep_since and t0 <= t <= t1:
                g = group(threads[wtid])
                wg = group(comm) + ("" if p == pid else "(ext)")
                slept_waker[g][wg] += (t - sleep_since[wtid]) * 1000
    elif ev == "sched:sched_switch":
        s = sw.search(rest)
        if not s: continue
        pc, ppid, pprio, pstate, nc, npid, nprio = s.groups()
        ppid, npid = int(ppid), int(npid)
        prev = running.get(cpu)
        if prev: hist[cpu].append((prev[1], t, pc, int(pprio)))
        running[cpu] = (npid, t)
        if ppid in threads and pstate not in ("R", "R+"):
            sleep_since[ppid] = t
        if npid in woken:
            wt, wc, wp = woken.pop(npid)
            if npid in threads and t0 <= t <= t1:
                d = (t - wt) * 1000
                g = group(threads[npid]) + "@" + nprio
                delays[g].append(d)
                wakers[g][group(wc) + ("" if wp == pid else "(ext)")] += 1
                if d > 4: long.append((d, threads[npid] + "@" + nprio, wt, t, cpu))
def pct(v, q):
    v = sorted(v); return v[min(len(v)-1, int(q*len(v)))] if v else 0
print("wakeup -> running delay per server thread group (ms):")
for g, v in sorted(delays.items(), key=lambda x: -len(x[1])):
    print(f"  {g:28s} n={len(v):7d} p50={pct(v,.5):6.3f} p99={pct(v,.99):7.3f} max={max(v):8.3f}  wakers: {dict(wakers[g].most_common(5))}")
print("\ntime asleep (ms, summed) before a wakeup, by waker group, for the admission-side groups:")
for g, d in slept_waker.items():
    top = sorted(d.items(), key=lambda x: -x[1])[:6]
    print(f"  {g:28s} " + ", ".join(f"{k}: {v:.0f}" for k, v in top))
print("\nlongest wakeup delays, with what ran on that CPU meanwhile:")
for d, name, wt, t, cpu in sorted(long, reverse=True)[:25]:
    ran = collections.Counter()
    for (a, b, c, pr) in hist[cpu]:
        o = min(b, t) - max(a, wt)
        if o > 0: ran[f"{group(c)}@{pr}"] += o * 1000
    print(f"  {d:7.2f} ms {name:24s} at {wt:.3f} cpu{cpu}: " + ", ".join(f"{k} {v:.1f}" for k, v in ran.most_common(4)))

# Per thread at nice 0: how often the portal's threads woke it, and how long
# it ran. The admissions' SQLite readers and writer belong here only when
# admissions wake them.
portal_woke = collections.Counter()
ran = collections.Counter()
at = {}
running = {}
for line in lines:
    m = head.match(line)
    if not m: continue
    comm, p, tid, cpu, t, ev, rest = m.groups()
    p, cpu, t = int(p), int(cpu), float(t)
    if ev.startswith("sched:sched_waking"):
        w = wk.search(rest)
        if w and p == pid and int(w.group(2)) in threads and group(comm) in ("bizrq-portal", "bizrq-render"):
            portal_woke[int(w.group(2))] += 1
    elif ev == "sched:sched_switch":
        s = sw.search(rest)
        if not s: continue
        if cpu in running:
            a, b = running[cpu]
            ran[a] += t - b
        running[cpu] = (int(s.group(6)), t)
        at[int(s.group(6))] = s.group(7)
print("\nthreads at nice 0 the portal's threads woke (wakeups, CPU time):")
for tid, n in portal_woke.most_common(12):
    if at.get(tid) == "120":
        print(f"  {threads[tid]:24s} tid {tid}: woken {n} times by the portal, ran {ran[tid]*1000:.0f} ms")
