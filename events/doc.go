// Package events is the spine of aegis: an append-only stream of
// [schemas.Event] values kept by a NATS server embedded in the aegis
// process, with JetStream file storage in the state directory.
//
// # Invariants
//
//   - Durable before acknowledged. The embedded server runs with SyncAlways,
//     so JetStream fsyncs each stored message before it acknowledges it.
//     [Store.Append] and [Receipt.Wait] return a position only after that
//     acknowledgement. An event whose Append returned survives a SIGKILL of
//     the process; a test kills a real child process under load to prove it.
//   - Validated before stored. An event that does not pass
//     [schemas.Event.Validate] is refused by [Store.Enqueue]; nothing
//     reaches the stream that [Store.Replay] could not decode.
//   - Stream order is a session's append order. Exactly one commit is in
//     flight at a time: it takes the queued events of the session of the
//     event at the head of the queue, in order (passing over other
//     sessions' events, which keep their places), publishes them as one
//     message and waits for the durable ack before the next commit starts.
//     Positions therefore increase in the order of a session's Enqueue
//     calls, and an event is durable no later than any event of its
//     session enqueued after it. Sessions that record at once (the HTTP
//     sessions of one gateway) share the commits that way: each commit
//     takes everything one session queued meanwhile, where taking the
//     queue's head as it was would commit their interleaved events one by
//     one.
//   - The waiter commits. A commit is run by whoever needs it first: the
//     goroutine in [Receipt.Wait] when no commit is in flight, otherwise the
//     committer goroutine (for events nobody waits for). Events queued with
//     [Store.EnqueueAwaited] (an intent, an outcome) start no commit of
//     their own: the relay's reader that waits for them commits them and
//     writes the frame, with no goroutine hand-off in between.
//   - A lean write path. Commits go over the committer's own in-process
//     connection (commitconn.go), which speaks the few lines of the NATS
//     protocol a publish needs and reads the JetStream ack itself; nats.go,
//     with its flusher, reader and subscription goroutines, serves replay,
//     follow and the approval channel. The embedded server sends that
//     connection no PINGs, neither the keep-alive ones nor the early first
//     one: the connection is read only during a commit, and a PING left
//     unread past the server's write deadline would get it dropped (in-
//     process connections cannot go stale anyway). One that arrives during
//     a commit is answered.
//   - Group commit. Events queued while a commit is in flight are published
//     together as one message (header Aegis-Events: N, the envelopes newline
//     separated, subject aegis.<session>.batch) and so share one fsync. A
//     lone event is published by itself on aegis.<session>.<kind>. A batch
//     never spans two sessions. The batch boundary is invisible above this
//     package: [Position] names the message and the index inside it, and
//     Replay and Follow hand out single events.
//   - Lazy events. An event queued with [Store.EnqueueLazy] (a frame that
//     carries no call and no answer) does not start a commit of its own: it
//     is durable with the next commit of its session that someone waits
//     for, or within Config.LazyFlush (25 ms) at the latest, and waiting on
//     its receipt commits it at once. Stream order still holds: a lazy
//     event is on disk no later than any event of its session enqueued
//     after it. Such events were never acknowledged to anyone, so a crash inside the window loses nothing
//     that was promised. A call's intent and an answer's outcome are never
//     lazy: they are awaited (see above), and the relay holds the frame
//     until they are durable.
//   - Frames built late. [Store.EnqueueFrame] queues a lazy frame event as
//     its raw bytes, kind and time; the commit that takes it builds the
//     envelope (id, base64, encoding). Its place in the queue, and so in the
//     stream, is fixed when it is enqueued, and the batch limits count it at
//     [schemas.FrameEventBound], never less than its real size. Building
//     cannot fail for a valid session and kind, which EnqueueFrame checks; if
//     it did, the commit would fail like any other (fail closed).
//   - Bounded queue. The events queued and not yet taken by a commit stay
//     under Config.MaxQueueBytes (32 MiB; an event that finds the queue
//     empty is always queued). An enqueue that would pass it first commits
//     from the head of the queue itself, or waits for the commit in flight
//     to end: backpressure on whoever records, so a flood of frames costs
//     disk time, not memory. It never deadlocks: a commit always ends
//     (acknowledged, failed or timed out), and the waiting enqueuer holds
//     no lock of the store meanwhile. A commit in flight holds one copy of
//     its message; the embedded server holds its own while it stores it.
//   - Capped, never trimmed. The stream always uses DiscardNew (set on every
//     Open): no limit ever deletes an old message. With Config.MaxBytes set,
//     a commit that would take the stream past it is refused and fails the
//     store with a [*FullError] (ErrFull, ErrFailed); every acknowledged
//     event stays. Open refuses a stream within 1 MiB of the cap, and each Open
//     sets the cap anew (or lifts it).
//   - Fail closed. If a commit fails or is not acknowledged within
//     Config.AckTimeout, every event in it and every later append fails
//     with [ErrFailed]; the store never drops an event silently and never
//     lets a later event land before an unacknowledged earlier one.
//   - One writer per state directory. Open takes an exclusive flock on
//     <dir>/lock and writes its PID there; a second Open fails at once with
//     a [*LockedError] naming the directory and that PID. The kernel drops
//     the lock when the holder dies, so a crash leaves no stale lock. On
//     Windows the lock is LockFileEx on one byte past any content
//     (package platform).
//   - Immutable. The stream denies delete and purge, so any gap in its
//     sequence, any message the store cannot load, and a stream shorter
//     than the length recorded at its last clean close (<dir>/stream-seq)
//     is loss. [Store.Check] reports it, and [Store.Replay] and
//     [Store.ReplaySubject] return a [*DamageError] naming the lost
//     sequences instead of a shorter history; no read waits forever for a
//     message that is gone. Only [Store.ReplaySalvage], for aegis export
//     --salvage, reads past the loss, naming every gap as it passes it.
//   - Rolled over whole, never trimmed. The only way history leaves the
//     stream is a rotation (rollover.go): the whole stream moves into an
//     archive that is a state directory of its own (readable, refusing
//     appends), and a new stream starts at the next sequence (recorded in
//     <dir>/stream-base, below which nothing counts as lost) with a
//     store.rotated event that says what moved. A plan written first makes
//     every Open but [FinishRoll]'s refuse the directory until the roll is
//     complete, so a crash never leaves it half-applied. An archive is
//     deleted only when its plan says so, after that event is durable.
//   - Readers write nothing. [Config.ReadOnly] (what the read commands
//     use) takes the lock like any Open, so no writer starts meanwhile,
//     but neither creates nor updates the stream (an update rewrites its
//     metadata), refuses appends and rollovers ([ErrReadOnly]), and leaves
//     the length mark as it is; the lock file's PID is overwritten in
//     place, and a reader goes on without it if even that fails. So a
//     reader needs no free byte: it reads a disk that is full to the
//     last one, and leaves every file of the stream as it found it (a
//     test compares them). Only the index (a cache) may still be saved,
//     where it fits.
//   - The index goes with its stream. A rotation moves the index folder
//     into the archive with the stream it was folded from, so the archive
//     answers from it at once; the new stream starts without one.
//   - A cache beside the stream. The index folder (IndexDir) holds
//     snapshots of folds, replaced whole and atomically; nothing in it is
//     a fact, and its users check it against the stream (by
//     [Store.MessageDigest]) before they trust it.
//   - A tap hands out only what was acknowledged. A [CommitTap] gets a
//     commit's events after its acknowledgement, in stream order, with
//     their sequences (a frame by its envelope alone); its reader folds
//     them instead of reading them back, and reads the stream for
//     anything the tap does not hold without a gap ([CommitTap.Rest]).
//     Each record it hands out says when its commit was acknowledged
//     (Record.Acked: one clock read per commit, only while a tap is
//     open), which the telemetry export times commits by. Nothing on the
//     commit's path waits for a tap.
//   - The disk is the limit. Without Config.MaxBytes the store may fill
//     its filesystem, and a commit that fails on a (nearly) full disk
//     fails with a [*DiskFullError] that says how much space is left.
//   - No network, except the approval channel. aegis reaches the server over
//     an in-process connection. Only with Config.Approvals does it listen,
//     on a random 127.0.0.1 port, and only for the approver identity (a
//     random password in a 0600 file in the runtime directory), which may
//     publish approval requests for its session and read their replies and
//     nothing else: not the stream, not the JetStream API (approve.go).
//     Its log lines go to the caller's slog.Logger.
//   - A private runtime directory. The credentials file lives in
//     $XDG_RUNTIME_DIR/aegis, else in <state dir>/run, never in a shared
//     directory such as /tmp where another user could create it first
//     ([RuntimeDirPath]). It must be a real directory of this user with
//     mode 0700, and XDG_RUNTIME_DIR one that only this user can write;
//     anything else is refused with the reason, never worked around. On
//     Windows the mode is read from the DACL (package platform): only the
//     user, SYSTEM and Administrators may have access, and what cannot be
//     judged is refused; aegis gives a directory it creates such a DACL.
//
// A fleet (hub.go): with [Config.Hub] the embedded server is also a leaf
// node of a NATS hub, under a JetStream domain named after the host, and
// the hub mirrors the stream ([MirrorConfig], [Enroll]). The hub pulls;
// a commit is acknowledged by the local stream alone and never waits for
// the link. The mirror reads the stream through a durable consumer the
// host keeps ([MirrorConsumer], hublink.go), so a host that links again
// is pulled at once; a mirror that holds more of the stream than the
// stream itself (a host name used with another state directory) is
// refused and never fed ([MirrorAheadError]), so two streams never mix in
// one mirror. The consumer's acknowledgements are what the mirror is
// known to hold: [Store.MirrorLag] reads from them, on the host, how far
// the mirror is behind. A reset skips nothing: the hub pulls anew after
// a reset of the consumer (its first request timed out because the host
// linked after the mirror was made, or the link came back) and takes the
// reset's answer as what it already holds; the consumer answers with the
// reset point itself (nats-server 2.15.3, which go.mod names; 2.15.2 read
// what it had delivered after the reset, so a message sent out before
// the mirror listened again counted as held and the mirror lacked it for
// good: about one start in twenty under load). A message sent out in that
// window reaches the mirror with a gap in the delivery numbers, and the
// mirror asks again. A mirror filled by an aegis built with 2.15.2 may
// lack such a message: readers of the mirror report it as damage when
// they read across it. A reader of a host's mirror (hubread.go) reads it
// from a position on, as [Store.Replay] reads the stream, and a
// [MirrorIndex] keeps the index of a mirror in a private folder on the
// reading machine, a cache checked against the mirror like the store's.
//
// The anchor log's witness client (events/witness) speaks C2SP
// tlog-witness to a witness's add-checkpoint endpoint; the hub's mirror
// carries the anchor log and its cosignatures with the rest of the
// stream, as record.checkpoint, store.rotated and anchor.cosigned events
// (the last committed alone, like checkpoints, so a reader finds them by
// subject).
//
// Nothing outside this package (and events/hubtest, which runs a real hub
// for tests) imports nats-server or nats.go.
package events
