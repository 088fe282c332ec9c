//! The recorder: one clock, one op-id counter, the history file written as
//! events happen, and the fenced sinks (one per resource).
use crate::history::{Event, FaultKind, Op, Outcome, Phase, Writer};
use std::collections::HashMap;
use std::fs::File;
use std::io::BufWriter;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

struct Inner {
    out: Writer<BufWriter<File>>,
    events: Vec<Event>,
    /// Per resource: the highest fence the sink accepted.
    sinks: HashMap<String, u64>,
    /// The first write error, reported at the end.
    error: Option<String>,
}

pub struct Recorder {
    start: Instant,
    ids: AtomicU64,
    processes: AtomicU64,
    inner: Mutex<Inner>,
}

impl Recorder {
    pub fn create(path: &Path) -> Result<Recorder, String> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        }
        let f = File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(Recorder {
            start: Instant::now(),
            ids: AtomicU64::new(1),
            processes: AtomicU64::new(0),
            inner: Mutex::new(Inner {
                out: Writer::new(BufWriter::new(f)),
                events: Vec::new(),
                sinks: HashMap::new(),
                error: None,
            }),
        })
    }

    /// Microseconds since the run started.
    pub fn now(&self) -> u64 {
        self.start.elapsed().as_micros() as u64
    }

    /// A fresh logical process number.
    pub fn process(&self) -> u64 {
        self.processes.fetch_add(1, Ordering::SeqCst)
    }

    fn push(inner: &mut Inner, e: Event) {
        if let Err(err) = inner.out.event(&e) {
            inner
                .error
                .get_or_insert(format!("writing the history: {err}"));
        }
        inner.events.push(e);
    }

    /// Records an event whose time is taken under the lock (so the file is
    /// in time order); `make` gets that time.
    fn record(&self, make: impl FnOnce(u64) -> Event) -> u64 {
        let mut inner = self.inner.lock().unwrap();
        let t = self.now();
        Self::push(&mut inner, make(t));
        t
    }

    pub fn meta(&self, e: Event) {
        let mut inner = self.inner.lock().unwrap();
        Self::push(&mut inner, e);
    }

    /// Records the invocation of `op`; returns (id, t).
    pub fn invoke(&self, client: u32, process: u64, op: &Op) -> (u64, u64) {
        let id = self.ids.fetch_add(1, Ordering::SeqCst);
        let t = self.record(|t| Event::Invoke {
            t,
            process,
            client,
            id,
            op: op.clone(),
        });
        (id, t)
    }

    pub fn complete(&self, client: u32, process: u64, id: u64, outcome: &Outcome) -> u64 {
        self.record(|t| Event::Complete {
            t,
            process,
            client,
            id,
            outcome: outcome.clone(),
        })
    }

    pub fn fault(
        &self,
        fault: FaultKind,
        phase: Phase,
        group: &str,
        client: Option<u32>,
        detail: &str,
    ) {
        self.record(|t| Event::Fault {
            t,
            fault,
            phase,
            group: group.into(),
            client,
            detail: detail.into(),
        });
    }

    /// A write to the fenced sink of `resource`, made only if the recorder's
    /// clock is still before `bound` (the holder's belief): the sink accepts
    /// it iff `fence` is at least the highest fence it accepted. Returns
    /// whether the write was made (`None`: the belief had ended).
    pub fn write(
        &self,
        client: u32,
        resource: &str,
        token: &str,
        fence: u64,
        bound: u64,
    ) -> Option<bool> {
        let mut inner = self.inner.lock().unwrap();
        let t = self.now();
        if t >= bound {
            return None;
        }
        Some(Self::sink_write(
            &mut inner, t, client, resource, token, fence, false,
        ))
    }

    /// A write made after the holder's belief ended (a leader paused past
    /// its lease): the sink judges it by its fence alone.
    pub fn late_write(&self, client: u32, resource: &str, token: &str, fence: u64) -> bool {
        let mut inner = self.inner.lock().unwrap();
        let t = self.now();
        Self::sink_write(&mut inner, t, client, resource, token, fence, true)
    }

    /// The sink accepts a write iff its fence is at least the highest it
    /// accepted.
    #[allow(clippy::too_many_arguments)]
    fn sink_write(
        inner: &mut Inner,
        t: u64,
        client: u32,
        resource: &str,
        token: &str,
        fence: u64,
        late: bool,
    ) -> bool {
        let highest = inner.sinks.entry(resource.to_string()).or_insert(0);
        let accepted = fence >= *highest;
        if accepted {
            *highest = fence;
        }
        let highest = *highest;
        Self::push(
            inner,
            Event::Write {
                t,
                client,
                resource: resource.into(),
                token: token.into(),
                fence,
                accepted,
                highest,
                late,
            },
        );
        accepted
    }

    /// Flushes the file and hands over the events.
    pub fn finish(&self) -> Result<Vec<Event>, String> {
        let mut inner = self.inner.lock().unwrap();
        if let Err(e) = inner.out.flush() {
            inner
                .error
                .get_or_insert(format!("writing the history: {e}"));
        }
        if let Some(e) = inner.error.take() {
            return Err(e);
        }
        Ok(std::mem::take(&mut inner.events))
    }
}
