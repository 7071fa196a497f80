// Package projector holds the audit chain that a proxy session appends
// through and the folds from events to state and to the JSONL export.
//
// # Audit chain
//
// [Chain] is the single writer of one session's chain (DESIGN rule 4). In one
// critical section it assigns seq and prev_hash, signs the lines of the signed
// set with the session key, computes the line_hash and hands the canonical
// bytes to a commit step ([Chain.AppendFunc]) that makes them durable. It
// advances only when the commit succeeds, so a failed write never leaves a
// line in the chain that is not in the store, and concurrent callers can
// never fork it. The chain is pure: no clock, no randomness and no I/O of its
// own; the key comes from [LoadKeyFile] or [GenerateKey] with a caller's
// random source.
//
// Invariants of every chain:
//   - the first line is open (seq 0, genesis prev_hash, the public key and the
//     previous session's tail from [TailOf] unless the record was empty);
//   - seq counts lines from 0 without gaps, and prev_hash is the previous
//     line's hash;
//   - nothing follows close;
//   - key_id never changes within the chain.
//
// # Sessions and the record file
//
// [Session] is the I/O shell around a chain for one proxy run. Each audit
// line travels inside an event (session.opened, call.intent, call.outcome,
// session.closed; payload member "line" holds the canonical bytes), and the
// chain's commit step enqueues that event on the stream inside the chain's
// critical section, so stream order is chain order. Callers wait on the
// event's receipt: an intent before its call is relayed, an outcome before
// its answer is. Intent and outcome events are queued with
// [events.Store.EnqueueAwaited], so the waiting goroutine runs their commit.
//
// The record file (--audit) is a projection: a timer, a few milliseconds
// after a line is queued, writes every line whose event is acknowledged, in
// chain order, without an fsync per line (the stream is the durable copy;
// the file is fsynced at Close). Nothing on the relay's path waits for it or
// wakes it. The
// same fold over a replay of the stream ([Record.Fold], [ReadRecord]) gives
// the same bytes, which is what aegis export writes. A crash can leave the
// file short of the stream, even mid-line; [CatchUp], run before the next
// session on the same file opens, appends exactly the missing bytes and
// refuses ([ErrRecordDiverged]) a file that holds anything other than a
// prefix of what the stream recorded for it, so a new session never links
// to a stale or altered tail. session.opened records the file's absolute
// path and the offset where the session's lines begin.
//
// One writer per record file. [OpenSession] opens (creating, mode 0600) and
// takes an exclusive flock on the record file itself before CatchUp and
// before any event of the session is written, and holds it until Close or
// Abandon; the kernel drops it if the process dies. Two sessions with
// different state directories therefore cannot interleave their chains in
// one file, whichever path, symbolic link or hard link reaches it: the second
// fails with a [*RecordLockedError] naming the holder's PID (read from
// /proc/locks, since the file holds nothing but audit lines). A record file
// that cannot be created (its directory is missing: [ErrNoRecordDir]) or
// locked is refused before session.opened, so no session is left in the
// stream that never ran, and no later CatchUp writes its open line.
//
// Only private files get evidence. The record file and its checkpoints
// sidecar are created 0600 with O_EXCL; an existing one must be a regular
// file of the effective user's with no group or other access (on Windows:
// owned by the user, and a DACL that grants no one else, package
// platform), opened with O_NOFOLLOW (Windows: a link is refused as looked
// at just before the open), else [*UnsafeFileError] ([ErrUnsafeRecordFile]) before
// session.opened. A link named as the record is followed only while each
// link is the user's own (recordfile.go).
//
// # Folds
//
// The transcript ([Timeline]), the session index ([SessionIndex]), the
// approvals, the profiles and [Recheck] are pure folds over the stream.
// They keep to what was recorded:
//   - an approval is resolved once; a later denial of an approved approval
//     revokes it, and any other later resolution (older gateways recorded
//     every escalation decision twice) is a duplicate that neither flips
//     nor counts as a decision;
//   - a gateway session's active profile is the default profile its
//     session.opened names, then that of each profile.switched event;
//   - recheck asks the policy what the proxy asked: the tool for a wrap
//     session; for a gateway session the wire name, the capability and the
//     active profile as role, and nothing for its meta-tools.
//
// # Telemetry
//
// [Telemetry] (telemetry.go) folds events into what aegis exports as
// metrics and traces: calls by server, tool and verdict, refusals by a
// closed set of reasons, approvals and their wait, commits, pins and
// sessions, and one [CallSpan] per call with its commits and approval
// wait. No label is unbounded (at most [MaxToolLabels] tool names, then
// [OtherLabel]); spans carry no arguments or results; span ids are derived
// from the session and the call, or taken from the host's trace context
// recorded in the intent line, so folding the same events again (aegis
// replay --otlp) gives the same spans. It keeps only open sessions. It
// reads of a call's payload and record line only the members its span and
// metrics take, in one pass over each (the line unescaped into a buffer the
// fold reuses), and reads them as the full reader of the record does
// (TestTelemetryCallReadsWhatTheRecordSays): a span never says other than
// its record line.
//
// # Index
//
// [Index] is the fold that start-up, aegis sessions and aegis export read
// instead of the whole stream: the session index and each session's
// [RecordSpan] (where its lines lie in its record file, their digest, and
// a mark every 4 MiB). [LoadIndex] reads its snapshot from the store's
// index folder, uses it only if its head names a message of this stream
// and its chunks are the ones the head was saved with, and folds the
// events after it; anything else folds the stream whole. A session saves
// it as it goes ([SessionConfig.IndexEvery]) and at Close, folding its own
// commits from a tap of the store ([events.CommitTap]) and reading back
// from the stream only what the tap lacks (another process's messages), so
// the index is what a fold of the stream gives. Sessions of one process
// that record at once share one ([SharedIndex], [SessionConfig.Shared]):
// it folds every commit once and saves for all of them, and a session
// begins (catches its file up) and stamps its file at Close under its
// lock. Catch-up reads
// from it what it checks ([Index.CatchUp]), and [Export] streams the
// record in one pass, one event at a time.
//
// The index also keeps the tool pins ([PinSet], pins.go): the fold of
// tool.pinned and pins.reset, saved in its head, so that a session reads
// its server's pins at open ([Session.Pins]) without reading the history.
//
// An index is folded from and saved beside an [IndexSource]: the store,
// or a host's mirror on a hub with a cache folder on the reading machine
// ([events.MirrorIndex]), checked against the mirror the same way. Read
// there, a session without a close line is unclosed ([ReadElsewhere]),
// not killed: the hub cannot tell whether it still runs.
//
// # Rotation
//
// A rotation (rotate.go) seals each record file the stream knows of only
// after [Index.CatchUp] and [Index.CheckFile] found it to hold exactly
// what the stream says was written to it; it moves the file to a numbered
// segment (a link and a remove, so no file is ever replaced) beside a
// signed checkpoint, and records all of it in the new stream's
// store.rotated event. The index keeps that event ([Index.Rotation]): a
// live file that a rotation sealed must then be empty until a session
// writes to it, and that session's open links to the segment's last line.
// [ApplySeals] can run again after a crash at any step. The index folded
// from the stream that a rotation rolls over goes with it into the
// archive (events moves the folder), where [LoadIndex] finds it whole and
// checks it against the archived stream like any snapshot: the archive's
// sessions are listed without a read of its history. [Index.Session]
// tells a reader where a session begins, so that its transcript reads
// only that session's messages.
//
// # Salvage
//
// [Salvage] writes what a damaged stream still holds of the record, with
// a gap line ([schemas.GapLine]) wherever audit lines may be missing, and
// reports each gap by the lines around it. It is the only reader that
// goes past lost messages, and only when the user asks.
//
// # Keys
//
// A key file is one line of 64 lowercase hex characters (the Ed25519 seed),
// mode 0600. [LoadKeyFile] refuses a file that group or others can access and
// never falls back to another key. [PrivateKey] never prints its seed and
// compares in constant time. The published development key
// ([InsecureDevKey]) is for tests only; key files refuse it.
//
// # Checkpoints
//
// [CheckpointFile] seals a record file that rotation renamed to a segment:
// it streams the file once, holding one line and O(log n) tree hashes
// ([TreeHasher]), and returns a C2SP signed note ([SignCheckpoint]) over the
// [schemas.Checkpoint] of it (line count, RFC 6962 root, last line hash),
// signed under the key name "aegis-<key_id>". It refuses a file that does
// not end in '\n' or holds an empty line, so a checkpoint never vouches for
// a torn write. [WriteCheckpointFile] puts the note next to the segment
// atomically (mode 0600); package verifier checks it.
//
// A live record file is checkpointed as it grows (livecheckpoint.go): the
// session's file projection feeds each line it writes to the tree, and
// signs a checkpoint of the file as it stands every
// [CheckpointPolicy.Lines] lines or [CheckpointPolicy.Interval], and at
// Close, over lines already in the file. The checkpoint is a
// record.checkpoint event, durable before the note is appended to
// RECORD.checkpoints; the event carries the tree's frontier, which the
// [Index] keeps per session, so a later session on the file resumes the
// tree and reads only the lines written since. A rotation moves the
// sidecar with its file. [ProveInclusion] and [ProveConsistency] make
// RFC 6962 proofs over a record file (prove.go) with tlog, keeping the
// tree's hashes in an unnamed temporary file, not in memory.
//
// # The anchor log
//
// Every record checkpoint a session signs, and every checkpoint a
// rotation seals a segment with, is also a leaf of the state directory's
// anchor log (anchor.go): one RFC 6962 log per signing key, origin
// "aegis/anchor/<key_id>", never renamed, so that witnesses can follow
// it. Its invariants:
//
//   - One event, leaf and growth together. A leaf's index and the signed
//     anchor checkpoint that adds it travel in the record.checkpoint event
//     itself, so a record checkpoint is in the stream exactly when its leaf
//     is, and both are durable before the note reaches the sidecar. A
//     rotation's store.rotated event carries the leaf hashes of the whole
//     log, since the stream before it moves to an archive.
//   - Stream order is leaf order. [Anchor.Append] holds the log's lock
//     from the leaf's index to the event's durable ack; an event that
//     fails takes its leaf back.
//   - Rebuilt, and checked, from the stream. [LoadAnchor] folds those
//     events, requires contiguous indexes and the root of the last signed
//     anchor checkpoint; a log that does not add up stops checkpoints
//     (fail closed) and says why.
//   - A start costs what came after the snapshot, not the history
//     (anchorsnap.go). A recording process ([OpenAnchor], in the
//     background: only the first append waits) starts from the snapshot
//     kept with the index: a head naming the log's size, its last signed
//     checkpoint and the stream position of the event that added its last
//     leaf, and a file of the log's stored hashes. It folds only the
//     events after that position, and uses the snapshot only if the
//     stream's event there added that leaf with that checkpoint, the
//     checkpoint verifies, and the file gives its root; else it rebuilds
//     from the stream (the index is a cache). The head is saved after
//     appends, in the background and reading nothing back from the
//     stream, and at [Anchor.Close]: after a kill -9 a start folds at most
//     the events of the appends since the last save.
//   - Bounded memory. The live log holds no per-leaf state in memory: its
//     stored hashes (about 64 bytes a leaf) are in the file, read back for
//     an append (the right edge, log2 n hashes) and for a witness's
//     consistency proof (2 log2 n). A reader (aegis prove anchor, and
//     aegis rotate's [SealAnchor]) reads the log with [ReadAnchor]: the
//     same snapshot, checked the same way, and only the events after it,
//     whose leaves alone it holds in memory; the others' hashes, and the
//     proofs, it reads from the hashes file. It writes nothing (a
//     read-only store or a reader's copy serves); a snapshot it cannot use
//     it leaves alone, folds the whole stream, and says why
//     ([AnchorTree.Snapshot]). It finds a record's checkpoints among the
//     leaves reading the hashes from the newest back, stopping at the
//     newest in the anchor checkpoint aegis prove anchor prefers, or when
//     it has them all ([AnchorTree.LeafIndexesDownTo]). [LoadAnchor] folds the whole stream into memory; only
//     tests use it, to check the others against it.
//   - Witnessing waits on nothing the relay needs ([Anchor.StartWitnessing],
//     witnessing.go): one goroutine per witness submits the newest
//     checkpoint at most once per interval, learns the witness's size from
//     its 409, treats a 409 of another history or a 422 as a fork (logged,
//     not retried until the log grows), checks each cosignature against the
//     witness's key, and stores it as an anchor.cosigned event.
//   - The cosignatures are read as the leaves are: from the snapshot's
//     head, then only the anchor.cosigned events after it. What is kept
//     is what aegis prove anchor chooses from (the checkpoint cosigned by
//     the most witnesses, the largest of those, that holds the leaf): a
//     size only while no larger one is cosigned by as many witnesses or
//     more, so at most one per number of witnesses. The recording process
//     folds each cosignature it stores under a lock held from the event's
//     enqueue, in stream order, and a save takes the last leaf before the
//     cosignatures: every anchor.cosigned event before either position
//     is in the head. A head's cosignatures are used only if each
//     verifies under the log's key with the log's root at its size and
//     its witness's line, they are what folding them keeps, and the
//     stream's event at their position is the last one they hold; else
//     every anchor.cosigned event is read again
//     ([AnchorTree.CosignedSnapshot] says why). A commit that failed
//     after it may have been durable stops the saving of them until the
//     next start. Either way the bundle is the same.
package projector
