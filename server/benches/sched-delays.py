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
around = None
if len(sys.argv) > 4 and sys.argv[3] == "--around":
    around = float(sys.argv[4])
t0 = float(sys.argv[3]) if len(sys.argv) > 3 and around is None else 0
t1 = float(sys.argv[4]) if len(sys.argv) > 4 and around is None else 1e18
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

if around is not None:
    # --around T: an admission sent at T (the record's clock) and answered
    # up to 3 s later. For each of the server's threads, what it did from
    # T on: ran, waited for a CPU once woken (and its longest such wait),
    # or slept (and who woke it at the end). A thread that slept through
    # most of it while another ran was waiting for that one; a thread that
    # waited for a CPU was starved, and the CPUs' lines say by whom.
    a0, a1 = around, around + 3.0
    state = {}   # tid -> (state, since)
    acc = collections.defaultdict(lambda: collections.Counter())
    longest = collections.defaultdict(float)
    woke_by = collections.defaultdict(collections.Counter)
    on_cpu = collections.defaultdict(collections.Counter)
    cur = {}
    for line in lines:
        m = head.match(line)
        if not m: continue
        comm, p, tid, cpu, t, ev, rest = m.groups()
        p, cpu, t = int(p), int(cpu), float(t)
        if t > a1: break
        def enter(x, st):
            old = state.get(x)
            if old and t > a0:
                d = (t - max(old[1], a0)) * 1000
                acc[x][old[0]] += d
                if old[0] == "waits for a CPU": longest[x] = max(longest[x], d)
            state[x] = (st, t)
        if ev.startswith("sched:sched_waking") or ev.startswith("sched:sched_wakeup_new"):
            w = wk.search(rest)
            if not w: continue
            x = int(w.group(2))
            if x in threads and (state.get(x, ("",))[0] != "runs"):
                enter(x, "waits for a CPU")
                if t >= a0: woke_by[x][group(comm) + ("" if p == pid else "(ext)")] += 1
        elif ev == "sched:sched_switch":
            sm = sw.search(rest)
            if not sm: continue
            pc, ppid, pprio, pstate, nc, npid, nprio = sm.groups()
            ppid, npid = int(ppid), int(npid)
            if cpu in cur and t > a0:
                c, since = cur[cpu]
                on_cpu[cpu][c] += (t - max(since, a0)) * 1000
            cur[cpu] = (f"{group(nc)}@{nprio}" + ("*" if npid in threads else ""), t)
            if ppid in threads:
                enter(ppid, "waits for a CPU" if pstate in ("R", "R+") else "sleeps")
            if npid in threads:
                enter(npid, "runs")
    for x, (st, since) in state.items():
        if x in threads:
            acc[x][st] += (a1 - max(since, a0)) * 1000
    for cpu, (c, since) in cur.items():
        on_cpu[cpu][c] += (a1 - max(since, a0)) * 1000
    print(f"the server's threads from {a0:.3f} for 3 s (ms; * = a thread of the server):")
    rows = sorted(acc.items(), key=lambda kv: -(kv[1]["runs"] + kv[1]["waits for a CPU"]))
    for x, c in rows:
        if c["runs"] + c["waits for a CPU"] < 1: continue
        print(f"  {threads[x]:26s} tid {x:7d}: runs {c['runs']:7.1f}, waits for a CPU {c['waits for a CPU']:7.1f} (longest {longest[x]:6.1f}), sleeps {c['sleeps']:7.1f}; woken by {dict(woke_by[x].most_common(3))}")
    for cpu in sorted(on_cpu):
        print(f"  cpu{cpu}: " + ", ".join(f"{k} {v:.0f}" for k, v in on_cpu[cpu].most_common(6)))
    sys.exit(0)
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
