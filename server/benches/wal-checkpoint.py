#!/usr/bin/env python3
"""How long a SQLite commit waits when another process floods the disk.

    python3 server/benches/wal-checkpoint.py auto|bg|kick SECONDS

bizrq's SQLite store (server/src/store/sql.rs) runs in WAL mode with
`synchronous = NORMAL`: a commit appends to the log and does not sync;
only a checkpoint (copying the log into the database) syncs, twice. The
writer checkpoints within a commit once the log holds
`wal_autocheckpoint` pages (1,000), and the background checkpoints
passively every 200 ms on a connection of its own.

This replays that shape without bizrq: one writer commits a 3 KB row 50
times a second (the admissions), two readers read without pause (the
portal), a second writer commits 200 rows every 0.5 s (the background),
and a checkpointer runs `PRAGMA wal_checkpoint(PASSIVE)`. Modes: `auto`
(the writer's own checkpoints at 1,000 pages, as bizrq runs), `bg` (none
in the writer: the checkpointer alone, every 200 ms), `kick` (the
checkpointer woken after each commit). Run it beside a process that
writes and syncs (`while :; do dd if=/dev/zero of=junk bs=1M count=300
conv=fsync; done`) to see a commit wait for the disk. It prints the
commits' latency and the log's largest size (docs/benchmarks.md, "the
writer waits for the disk").
"""
import sqlite3, threading, time, os, sys, statistics
mode = sys.argv[1]  # "auto" or "bg"
secs = float(sys.argv[2])
path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"bizrq-wal-{mode}.db")
for s in ("", "-wal", "-shm"):
    try: os.remove(path + s)
    except FileNotFoundError: pass
def conn():
    c = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=10)
    c.execute("PRAGMA journal_mode=WAL"); c.execute("PRAGMA synchronous=NORMAL")
    return c
w = conn()
w.execute(f"PRAGMA wal_autocheckpoint={1000 if mode=='auto' else 0}")
w.execute("CREATE TABLE q (name TEXT PRIMARY KEY, status TEXT)")
w.execute("CREATE TABLE s (id INTEGER PRIMARY KEY, data TEXT)")
for i in range(2000): w.execute("INSERT INTO q VALUES (?, ?)", (f"q{i}", "x"*3000))
stop = False
def reader():
    r = conn()
    while not stop:
        r.execute("SELECT count(*), sum(length(status)) FROM q").fetchall()
def bgwriter():
    b = conn()
    while not stop:
        b.execute("BEGIN IMMEDIATE")
        for i in range(200): b.execute("INSERT INTO s (data) VALUES (?)", ("y"*2000,))
        b.execute("COMMIT"); time.sleep(0.5)
ev = threading.Event()
def ckpt():
    c = conn(); mx = 0
    while not stop:
        if mode == "kick":
            ev.wait(0.2); ev.clear()
        c.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        if mode != "kick": time.sleep(0.2)
ts = [threading.Thread(target=f) for f in (reader, reader, bgwriter, ckpt)]
[t.start() for t in ts]
lat = []; walmax = 0; t_end = time.time() + secs; i = 0
while time.time() < t_end:
    t = time.perf_counter()
    w.execute("UPDATE q SET status = ? WHERE name = ?", ("z"*3000 + str(i), f"q{i%16}"))
    lat.append((time.perf_counter() - t) * 1000); i += 1
    ev.set()
    try: walmax = max(walmax, os.path.getsize(path + "-wal"))
    except FileNotFoundError: pass
    time.sleep(0.02)
stop = True
lat.sort()
print(f"{mode}: n={len(lat)} p50={lat[len(lat)//2]:.2f} p99={lat[int(len(lat)*.99)]:.2f} max={lat[-1]:.1f} ms; >100ms: {sum(1 for x in lat if x>100)}; wal max {walmax/1e6:.1f} MB")
