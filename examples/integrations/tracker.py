#!/usr/bin/env python3
"""An experiment-tracker bridge: every attempt, preemption and committed
checkpoint of a team's jobs, written to a SQLite database.

It follows the stored events its principal may read (its team's shares,
nothing else: the NATS permissions and ListEvents confine it) and writes
each one in a transaction together with the event's cursor. Killed at any
moment and started again, it goes on after the last event it stored: no
event missed, none written twice.

    tracker.py --nats nats://127.0.0.1:4222 --nkey vision-tracker.nk --db runs.sqlite
    tracker.py --db runs.sqlite --report        what the database holds, as JSON

Tables: attempts (one row per job and attempt: when it ran, how it ended),
preemptions (started and completed), checkpoints, and events (every event
as received, by cursor).
"""

import argparse
import asyncio
import json
import signal
import sqlite3
import sys

SCHEMA = """
CREATE TABLE IF NOT EXISTS position (id INTEGER PRIMARY KEY CHECK (id = 1), after TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS events (
    cursor TEXT PRIMARY KEY, kind TEXT NOT NULL, job_queue TEXT NOT NULL,
    quota_share_name TEXT NOT NULL, job_id TEXT NOT NULL, event TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS attempts (
    job_id TEXT NOT NULL, attempt INTEGER NOT NULL, job_name TEXT, job_queue TEXT,
    quota_share_name TEXT, started_at INTEGER, ended_at INTEGER, ended_as TEXT, reason TEXT,
    PRIMARY KEY (job_id, attempt));
CREATE TABLE IF NOT EXISTS preemptions (
    job_id TEXT NOT NULL, attempt INTEGER NOT NULL, kind TEXT NOT NULL, for_job_id TEXT,
    started_at INTEGER, completed_at INTEGER, PRIMARY KEY (job_id, attempt));
CREATE TABLE IF NOT EXISTS checkpoints (
    job_id TEXT NOT NULL, attempt INTEGER NOT NULL, seq INTEGER NOT NULL, step INTEGER,
    created_at INTEGER, PRIMARY KEY (job_id, seq));
"""


def open_db(path):
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.executescript(SCHEMA)
    return db


def record(db, event):
    """Writes one event and its cursor in one transaction."""
    db.execute("BEGIN IMMEDIATE")
    try:
        db.execute(
            "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?)",
            (event.cursor, event.kind, event.job_queue, event.quota_share_name, event.job_id,
             json.dumps(event.event, sort_keys=True)),
        )
        if (c := event.job()) is not None and c.attempt is not None:
            if c.to == "RUNNING" and c.from_ != "RUNNING":
                db.execute(
                    "INSERT OR IGNORE INTO attempts (job_id, attempt, job_name, job_queue, quota_share_name,"
                    " started_at) VALUES (?, ?, ?, ?, ?, ?)",
                    (c.job_id, c.attempt, c.job_name, c.job_queue, c.quota_share_name, c.at),
                )
            elif c.from_ in ("RUNNING", "STARTING") and c.to not in ("RUNNING", "STARTING"):
                db.execute(
                    "UPDATE attempts SET ended_at = ?, ended_as = ?, reason = ? WHERE job_id = ? AND attempt = ?",
                    (c.at, c.to, c.status_reason, c.job_id, c.attempt),
                )
        elif (p := event.preemption()) is not None:
            if p.phase == "started":
                db.execute(
                    "INSERT OR IGNORE INTO preemptions (job_id, attempt, kind, for_job_id, started_at)"
                    " VALUES (?, ?, ?, ?, ?)",
                    (p.job_id, p.attempt, p.kind, p.for_job_id, p.at),
                )
            else:
                db.execute(
                    "UPDATE preemptions SET completed_at = ? WHERE job_id = ? AND attempt = ?",
                    (p.at, p.job_id, p.attempt),
                )
        elif (k := event.checkpoint()) is not None:
            db.execute(
                "INSERT OR IGNORE INTO checkpoints VALUES (?, ?, ?, ?, ?)",
                (k.job_id, k.attempt, k.seq, k.step, k.created_at),
            )
        db.execute("INSERT INTO position VALUES (1, ?) ON CONFLICT (id) DO UPDATE SET after = excluded.after",
                   (event.cursor,))
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


async def follow(args):
    import quartermaster as qm

    db = open_db(args.db)
    row = db.execute("SELECT after FROM position").fetchone()
    after = row[0] if row else None
    client = await qm.connect(args.nats, nkey_file=args.nkey, ca_file=args.ca_file)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for s in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(s, stop.set)
    print(f"tracker: {client.principal} following its team's events "
          f"{'after ' + after if after else 'from the oldest kept'} into {args.db}", flush=True)
    events = client.events(job_queue=args.queue, quota_share_name=args.share, after=after)
    n = 0
    try:
        while not stop.is_set():
            next_event = asyncio.ensure_future(events.__anext__())
            stopped = asyncio.ensure_future(stop.wait())
            done, _ = await asyncio.wait({next_event, stopped}, return_when=asyncio.FIRST_COMPLETED)
            if next_event not in done:
                next_event.cancel()
                break
            stopped.cancel()
            event = next_event.result()
            record(db, event)
            n += 1
            print(f"tracker: {event.describe()}", flush=True)
    except qm.AccessDenied as e:
        print(f"tracker: access denied: {e}", file=sys.stderr)
        return 3
    except qm.InvalidRequest as e:
        print(f"tracker: {e}", file=sys.stderr)
        return 2
    finally:
        await client.close()
        db.close()
    print(f"tracker: stopped after {n} event(s)", flush=True)
    return 0


def report(path):
    db = open_db(path)
    rows = lambda q: [list(r) for r in db.execute(q)]
    print(json.dumps({
        "after": (db.execute("SELECT after FROM position").fetchone() or [None])[0],
        "events": rows("SELECT cursor, kind, job_id FROM events ORDER BY rowid"),
        "attempts": rows("SELECT job_id, attempt, started_at, ended_at, ended_as, reason FROM attempts"
                         " ORDER BY job_id, attempt"),
        "preemptions": rows("SELECT job_id, attempt, kind, for_job_id, started_at, completed_at FROM preemptions"),
        "checkpoints": rows("SELECT job_id, attempt, seq, step FROM checkpoints ORDER BY job_id, seq"),
    }))
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--db", required=True, help="the SQLite database (made if absent)")
    p.add_argument("--nats", default="nats://127.0.0.1:4222", help="NATS server(s), comma-separated")
    p.add_argument("--nkey", help="the credentials file `qm auth` wrote for the tracker's principal")
    p.add_argument("--ca-file", help="CA certificate for TLS")
    p.add_argument("--queue", help="only this queue's events")
    p.add_argument("--share", help="only this share's events (needs --queue)")
    p.add_argument("--report", action="store_true", help="print what the database holds, as JSON, and exit")
    args = p.parse_args()
    if args.report:
        return report(args.db)
    if not args.nkey:
        p.error("--nkey is required to follow events")
    return asyncio.run(follow(args))


if __name__ == "__main__":
    sys.exit(main())
