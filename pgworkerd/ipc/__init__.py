"""The protocol between the supervisor and each worker child: every channel, what
travels on it, and the ordering rules both sides rely on.

Three channels, each with one writer and one reader:

1. **Status pipe**, child -> supervisor (`status_pipe.py`, messages in `messages.py`).
   One JSON object a line. It tells the supervisor which jobs the child holds (to
   renew their leases, and to settle them if the child dies) and how each one ended:

       claimed    leased jobs, numbered first, first+1, ... in claim order
       finishing  these handlers returned; their outcomes are being written
       done       these outcomes are written (or their leases were found lost)
       released   these jobs were given back unstarted, uncharged
       skipping   these claimed jobs will not start (their `skip` lines are read):
                  the supervisor releases the leases their cancelled rows hold
       idle       nothing to claim: waiting for a `wake` on the control pipe
       stopping   no job starts after this line (drain, recycle)
       boot_error the child cannot work at all; it exits with ExitCode.BOOT_ERROR

2. **Start board**, child -> supervisor (`start_board.py`): shared memory with one
   record per execution slot of the child (`threads: N` gives N; a child that runs one
   job at a time has one), saying which claimed job (by number) the slot started last,
   and when (CLOCK_MONOTONIC, the same clock in every process of the host: the
   supervisor's runtime deadlines use it as it is). A message per start would cost the
   child a write and the supervisor a wake-up for every job; the supervisor reads the
   board on its own schedule instead.

3. **Control pipe**, supervisor -> child (`control.py`): `skip <id> <token>` (the
   lease of that unstarted job is gone: do not start it; after the skips of a cancel
   of a job whose queue has a concurrency limit, SIGUSR1 to a one-thread child, whose
   handler runs in the thread that reads the pipe), `wake` (a job it can run
   was enqueued), `timeout <id>` (that running job passed its max runtime: raise
   JobTimeout in it; SIGUSR1 follows the line, so the child is woken to read it) and
   `cancel <id>` (that running job was cancelled: JobCancelled, SIGUSR1 likewise)
   and `pause <key>` (that key was just paused: give back, unstarted, its jobs claimed
   so far; no signal, the child reads the pipe before each start).
   The supervisor counts the lines it wrote on the start board, so the child reads
   the pipe only when that count moved. It also posts there each renewal of the
   child's leases that answered (sent when, covering which claim numbers), which the
   child's lease guard reads (worker/lease_guard.py).

Ordering rules:

* The child sends `claimed` before it starts any job of that claim, and starts a
  child's claimed jobs in claim-number order (each in the first free slot). Hence a
  start posted in a slot means the job that slot ran before has returned, and a job
  numbered below the highest started number that no slot shows any more has been
  started and has returned too (its record was overwritten before the supervisor
  looked), unless the child gave it back (`released`: a key pause gives back claimed
  jobs of its key and starts the others after them). The supervisor reads the board
  before it acts on each message, because a message may depend on the starts before
  it (`stopping` releases only unstarted jobs).
* The child counts on the board, with each start it posts, the `released` messages it
  sent before it. The supervisor acts on a look at the board only when it has read as
  many: else it would count jobs given back as started (`pgworkerd_jobs_started`) and
  hold them as finishing. The `released` is in the pipe already, so it looks again
  soon; the messages before it need none of those starts (no `stopping` is among
  them: nothing starts after it; a `done` follows a `finishing` of its jobs, which
  counts a start not seen).
* The child posts one start at a time: the record, then the counter of starts posted.
  The supervisor reads every slot's record between two reads of that counter, and
  again if it moved: its view of the slots is of one moment.
* `finishing` is sent before an outcome's write and `done` after it: when the
  supervisor's renewal finds a lease gone, a job it knows as finishing was ended by
  its own holder, not rescued, and is let be.
* Deciding to start a job and posting its start are one step: a `stopping` caused by
  a SIGTERM that arrives in between is sent only after the post.
* The supervisor writes a control line before counting it on the board; the child
  reads the count before the pipe, so no line is left unread.
* A child says `skipping` only for jobs it has not come to yet, after reading their
  `skip` lines, which its decision step then finds: so the supervisor may release
  their leases without racing a start. It never releases a skipped job's lease on
  its own (the child may have decided to start it before the `skip` came).
* Lines on the status pipe are written whole, with the signals whose handlers also
  write to it held off, so they never interleave; a child killed mid-line leaves a
  fragment that the reader drops. Messages said at the same moment go in one write
  (a claim that also wrote successes sends `done` then `claimed`): one wake-up of
  the supervisor instead of two; the reader takes them line by line, in order.
"""

from pgworkerd.ipc.control import ControlReader, ControlWriter, Skip
from pgworkerd.ipc.exits import ExitCode
from pgworkerd.ipc.messages import (
    BootError,
    Claimed,
    ClaimedJob,
    Done,
    Finishing,
    Idle,
    Message,
    Released,
    Skipping,
    Stopping,
    claimed_job,
)
from pgworkerd.ipc.start_board import StartBoard, StartRecord
from pgworkerd.ipc.status_pipe import StatusReader, StatusWriter

__all__ = [
    "BootError",
    "Claimed",
    "ClaimedJob",
    "ControlReader",
    "ControlWriter",
    "Done",
    "ExitCode",
    "Finishing",
    "Idle",
    "Message",
    "Released",
    "Skip",
    "Skipping",
    "StartBoard",
    "StartRecord",
    "StatusReader",
    "StatusWriter",
    "Stopping",
    "claimed_job",
]
