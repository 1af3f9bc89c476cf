//! Several runs at once (`--jobs`): the runs of a group whose instruments count exactly
//! whatever else the machine does ([`Instrument::overlaps`]). Each run is started as
//! [`run_once`](super::run_once) starts one (prepared, held at its start latch while the
//! instruments attach, released); the instruments then park what they hold about it
//! ([`Instrument::park`]) and the next run is started, up to `jobs` in flight. One thread
//! polls them all: as each ends, its instruments get their run back and collect it.
//!
//! What differs from runs one at a time: the processes a run left behind (found once the
//! benchmark is reaped, see `kill_survivors`) are looked for only when no other run is
//! in flight, since a process one running benchmark hands to us would look the same; they
//! are named on the outcome of the run that ended last.

use std::os::fd::AsFd;
use std::time::Instant;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};

use super::{
    instrument_error, kill_survivors, prepare, reap, spawn_error, start, Cancel, Ended, RunConfig,
    RunError, Started,
};
use crate::run::instrument::{InFlight, Instrument, RunAgain, RunOutcome, Sample};

/// The result of one run: its outcome and samples, or why it has none.
pub type RunResult = Result<(RunOutcome, Vec<Sample>), RunError>;

/// One run to make: how to start it, and which set of instruments measures it (an index
/// into the sets given to [`run_overlapping`]; runs of one set share its instruments).
#[derive(Debug, Clone, Copy)]
pub struct Planned<'a> {
    /// How to start it.
    pub config: &'a RunConfig,
    /// Its instruments.
    pub set: usize,
}

/// A run in flight.
struct Flight {
    /// Its place in the planned runs (they start in that order).
    index: usize,
    set: usize,
    started: Started,
    /// What each instrument of its set parked, in order.
    parked: Vec<InFlight>,
}

/// Make `runs` with at most `jobs` of them in flight, in their order; `done` is told of
/// each end. Returns the result of every run started, in the order of `runs`: all of
/// them, or, once `stop` says yes of a result (a failed run that ends the plan), those
/// started by then (the ones in flight are waited for). A signal ([`Cancel`]) kills
/// every run in flight; each then ends with [`RunError::Interrupted`].
///
/// When a run's instruments answer [`RunAgain`] (they changed how they measure), the
/// runs of the same set started before that answer was read are dropped as they end and
/// answer `RunAgain` too: the caller makes each of them again.
pub fn run_overlapping(
    sets: &mut [&mut [Box<dyn Instrument>]],
    runs: &[Planned],
    jobs: usize,
    cancel: &Cancel,
    stop: &dyn Fn(&RunResult) -> bool,
    done: &mut dyn FnMut(),
) -> Vec<RunResult> {
    let mut pool = Pool {
        results: runs.iter().map(|_| None).collect(),
        flights: Vec::new(),
        next: 0,
        stopping: false,
        changed_at: vec![0; sets.len()],
    };
    loop {
        while !pool.stopping && pool.flights.len() < jobs.max(1) && pool.next < runs.len() {
            pool.launch(sets, runs, cancel, stop, done);
        }
        if pool.flights.is_empty() {
            break;
        }
        match wait_for_any(&mut pool.flights, runs, cancel) {
            Ok((k, ended)) => pool.land(k, ended, sets, runs, stop, done),
            Err(e) => pool.abort_all(sets, e),
        }
    }
    pool.results.into_iter().map_while(|r| r).collect()
}

/// The runs of one [`run_overlapping`].
struct Pool {
    /// Per planned run, once it has ended (or failed to start).
    results: Vec<Option<RunResult>>,
    flights: Vec<Flight>,
    /// The next planned run to start.
    next: usize,
    /// No more runs start.
    stopping: bool,
    /// Per set: the runs planned before this place were started before its instruments
    /// changed how they measure (one of its runs answered `RunAgain`).
    changed_at: Vec<usize>,
}

impl Pool {
    /// Start the next planned run.
    fn launch(
        &mut self,
        sets: &mut [&mut [Box<dyn Instrument>]],
        runs: &[Planned],
        cancel: &Cancel,
        stop: &dyn Fn(&RunResult) -> bool,
        done: &mut dyn FnMut(),
    ) {
        let (index, run) = (self.next, runs[self.next]);
        self.next += 1;
        match launch(run.config, sets[run.set], cancel) {
            Ok(started) => self.flights.push(Flight {
                index,
                set: run.set,
                started,
                parked: sets[run.set].iter_mut().map(|i| i.park()).collect(),
            }),
            Err(e) => self.end(index, Err(e), stop, done),
        }
    }

    /// The run in flight `k` ended: reaped and collected, or dropped if its instruments
    /// changed since it started.
    fn land(
        &mut self,
        k: usize,
        ended: Ended,
        sets: &mut [&mut [Box<dyn Instrument>]],
        runs: &[Planned],
        stop: &dyn Fn(&RunResult) -> bool,
        done: &mut dyn FnMut(),
    ) {
        let last = self.flights.len() == 1 && (self.stopping || self.next == runs.len());
        let flight = self.flights.swap_remove(k);
        let instruments = &mut *sets[flight.set];
        let result = if flight.index < self.changed_at[flight.set] {
            abort(instruments, flight.parked);
            Err(measured_otherwise())
        } else {
            let config = runs[flight.index].config;
            land(
                flight.started,
                ended,
                instruments,
                flight.parked,
                config,
                last,
            )
        };
        if matches!(&result, Err(e) if e.asks_again()) {
            self.changed_at[flight.set] = self.next;
        }
        self.end(flight.index, result, stop, done);
    }

    /// Interrupted (or the wait failed): every run in flight ends here, its process group
    /// killed as its guard drops.
    fn abort_all(&mut self, sets: &mut [&mut [Box<dyn Instrument>]], e: RunError) {
        let why = e.to_string();
        for flight in self.flights.drain(..) {
            abort(&mut *sets[flight.set], flight.parked);
            self.results[flight.index] = Some(Err(match e {
                RunError::Interrupted => RunError::Interrupted,
                _ => RunError::Instrument {
                    instrument: "overlapping runs".into(),
                    source: anyhow::anyhow!("{why}"),
                },
            }));
        }
        self.stopping = true;
    }

    fn end(
        &mut self,
        index: usize,
        result: RunResult,
        stop: &dyn Fn(&RunResult) -> bool,
        done: &mut dyn FnMut(),
    ) {
        self.stopping |= stop(&result);
        self.results[index] = Some(result);
        done();
    }
}

/// The answer for a run started before its instruments changed how they measure: to be
/// made again, as the run that told them.
fn measured_otherwise() -> RunError {
    RunError::Instrument {
        instrument: "overlapping runs".into(),
        source: RunAgain(
            "an instrument changed how it measures while this run was in flight".into(),
        )
        .into(),
    }
}

/// Prepare and start one run; its instruments abort it if it does not start.
fn launch(
    config: &RunConfig,
    instruments: &mut [Box<dyn Instrument>],
    cancel: &Cancel,
) -> Result<Started, RunError> {
    if cancel.requested() {
        return Err(RunError::Interrupted);
    }
    let started = prepare(config, instruments).and_then(|l| start(config, instruments, l, cancel));
    if started.is_err() {
        for i in instruments.iter_mut() {
            i.abort_run();
        }
    }
    started
}

/// Give each instrument its run back and drop it (the run did not end with an outcome).
fn abort(instruments: &mut [Box<dyn Instrument>], parked: Vec<InFlight>) {
    for (i, run) in instruments.iter_mut().zip(parked) {
        i.resume(run);
        i.abort_run();
    }
}

/// A run that ended: reaped, and collected by its instruments, their runs given back.
fn land(
    started: Started,
    ended: Ended,
    instruments: &mut [Box<dyn Instrument>],
    parked: Vec<InFlight>,
    config: &RunConfig,
    last: bool,
) -> RunResult {
    for (i, run) in instruments.iter_mut().zip(parked) {
        i.resume(run);
    }
    let result = reap(config, started, ended, last).and_then(|outcome| {
        let mut samples = Vec::new();
        for i in instruments.iter_mut() {
            i.collect(&outcome, &mut samples)
                .map_err(|e| instrument_error(i.as_ref(), e))?;
        }
        Ok((outcome, samples))
    });
    if result.is_err() {
        for i in instruments.iter_mut() {
            i.abort_run();
        }
    }
    result
}

/// Wait until one of `flights` ends, stops or passes its deadline (its place among them,
/// and how it ended), or a signal asks us to stop.
fn wait_for_any(
    flights: &mut [Flight],
    runs: &[Planned],
    cancel: &Cancel,
) -> Result<(usize, Ended), RunError> {
    loop {
        let now = Instant::now();
        let mut soonest: Option<std::time::Duration> = None;
        for (k, f) in flights.iter().enumerate() {
            let Some(timeout) = runs[f.index].config.timeout else {
                continue;
            };
            match timeout.checked_sub(now.duration_since(f.started.deadline_from)) {
                Some(left) => soonest = Some(soonest.map_or(left, |s| s.min(left))),
                None => {
                    return Ok((
                        k,
                        Ended {
                            wall: f.started.start.elapsed(),
                            timed_out: true,
                        },
                    ))
                }
            }
        }
        let wait = soonest.map_or(PollTimeout::NONE, |d| {
            PollTimeout::try_from(d).unwrap_or(PollTimeout::MAX)
        });
        // Per flight its report pipe (its end for a run at once, a stop for any), then its
        // pidfd (a latched run's end) if it has one.
        let mut fds = vec![PollFd::new(cancel.read.as_fd(), PollFlags::POLLIN)];
        let mut owner = Vec::new();
        for (k, f) in flights.iter().enumerate() {
            fds.push(PollFd::new(f.started.report.as_fd(), PollFlags::POLLIN));
            owner.push((k, true));
            if let Some(pidfd) = &f.started.pidfd {
                fds.push(PollFd::new(pidfd.as_fd(), PollFlags::POLLIN));
                owner.push((k, false));
            }
        }
        match poll(&mut fds, wait) {
            Ok(0) => continue,
            Ok(_) => {
                if fds[0].any().unwrap_or(false) {
                    return Err(RunError::Interrupted);
                }
                let ready = fds[1..].iter().position(|f| f.any().unwrap_or(false));
                drop(fds);
                if let Some((k, report)) = ready.map(|i| owner[i]) {
                    let wall = flights[k].started.start.elapsed();
                    if report {
                        let config = runs[flights[k].index].config;
                        flights[k].started.read_early(config)?;
                    }
                    return Ok((
                        k,
                        Ended {
                            wall,
                            timed_out: false,
                        },
                    ));
                }
            }
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => {
                let config = runs[flights[0].index].config;
                return Err(spawn_error(config, e.into()));
            }
        }
    }
}

/// Processes left behind, named only when nothing else runs (see the module's doc).
pub(super) fn survivors(last: bool) -> Vec<String> {
    match last {
        true => kill_survivors(),
        false => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::instrument::{ChildSetup, ExitKind, MetricSpec};
    use sbs_reports::model::Unit;

    /// Numbers each run at `prepare` and reports the number it collects: each run must
    /// get back its own. Answers `RunAgain` for the run numbered `again`.
    struct Numbered {
        prepared: u64,
        current: Option<u64>,
        again: Option<u64>,
    }

    impl Instrument for Numbered {
        fn name(&self) -> &str {
            "numbered"
        }
        fn prepare(&mut self, setup: &mut ChildSetup) -> anyhow::Result<()> {
            self.prepared += 1;
            self.current = Some(self.prepared);
            setup
                .env
                .push(("RUN".into(), self.prepared.to_string().into()));
            Ok(())
        }
        fn collect(&mut self, o: &RunOutcome, out: &mut Vec<Sample>) -> anyhow::Result<()> {
            let n = self.current.take().expect("collect gets its run back");
            if Some(n) == self.again.take() {
                return Err(RunAgain("measures otherwise now".into()).into());
            }
            // The child exits with its number: the run and the state are the same one.
            assert_eq!(o.exit, ExitKind::Code(n as i32));
            out.push(Sample::new(
                MetricSpec::new("n", Unit::Count, "test", true),
                n as f64,
            ));
            Ok(())
        }
        fn overlaps(&self) -> bool {
            true
        }
        fn park(&mut self) -> InFlight {
            InFlight::new(self.current.take())
        }
        fn resume(&mut self, run: InFlight) {
            self.current = run.take().flatten();
        }
    }

    fn run_all(again: Option<u64>) -> Vec<RunResult> {
        let cancel = Cancel::install().unwrap();
        let mut numbered: Vec<Box<dyn Instrument>> = vec![Box::new(Numbered {
            prepared: 0,
            current: None,
            again,
        })];
        let mut sets = [numbered.as_mut_slice()];
        // The first run ends last: the others overtake it.
        let config =
            super::super::tests::config(&["/bin/sh", "-c", "[ $RUN = 1 ] && sleep 0.3; exit $RUN"]);
        let runs = [Planned {
            config: &config,
            set: 0,
        }; 4];
        let mut ended = 0;
        let results = run_overlapping(&mut sets, &runs, 2, &cancel, &|_| false, &mut || ended += 1);
        assert_eq!(ended, 4);
        results
    }

    #[test]
    fn each_run_gets_its_own_state_back_whatever_order_they_end_in() {
        let values: Vec<f64> = run_all(None)
            .into_iter()
            .map(|r| r.expect("a run").1[0].value)
            .collect();
        assert_eq!(values, [1.0, 2.0, 3.0, 4.0]);
    }

    #[test]
    fn runs_started_before_an_instrument_changed_are_asked_again() {
        // Run 2 ends first and asks again; run 1, in flight since before, is dropped.
        let results = run_all(Some(2));
        let again: Vec<bool> = results
            .iter()
            .map(|r| matches!(r, Err(e) if e.asks_again()))
            .collect();
        assert_eq!(again, [true, true, false, false]);
    }
}
