//! `qm-trainer`: the example training workload. It trains a small MLP on data
//! generated from a seed and follows Quartermaster's checkpoint contract:
//!
//! - its full state (weights, optimizer velocities, RNG, step) is saved
//!   atomically to `$QM_CHECKPOINT_DIR` every `--checkpoint-every` steps;
//! - on start it resumes from the checkpoint there, if any;
//! - on SIGTERM (preemption) it saves a final checkpoint and exits 0
//!   (unless `--no-save-on-stop`: then it exits at once, as a script that
//!   only saves periodically does);
//! - on SIGUSR1 (checkpoint-then-preempt asks for a checkpoint now) it
//!   saves one at the end of the step and trains on (unless
//!   `--ignore-checkpoint-signal`);
//! - when done it prints `digest=<sha256 of the final weights>`.
//!
//! A resumed run prints the same digest as an uninterrupted one: that is the
//! proof that resume is valid, not just that the process restarted.

mod checkpoint;
mod model;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};

use model::{Data, State};

const USAGE: &str =
    "usage: qm-trainer [--steps N] [--checkpoint-every K] [--seed S] [--step-delay-ms D]

Trains a small MLP on data generated from the seed, checkpointing to
$QM_CHECKPOINT_DIR (default ./checkpoints) every K steps and on SIGTERM, and
resuming from it on start. Prints `digest=<hex>` of the final weights.

  --steps N            total training steps (default 2000)
  --checkpoint-every K steps between checkpoints (default 100)
  --seed S             data and initialisation seed (default 42)
  --step-delay-ms D    sleep after each step, to make runs last (default 0)
  --no-save-on-stop    on SIGTERM exit at once (143) without saving
  --ignore-checkpoint-signal
                       ignore SIGUSR1 instead of saving a checkpoint now
  --forget-optimizer-on-resume
                       a faulty resume, for resume drills: restore the
                       weights but start the optimizer's velocities over

When done it also writes the digest to $QM_RESULT_FILE, if set (what a
resume drill compares).";

struct Args {
    steps: u64,
    every: u64,
    seed: u64,
    delay_ms: u64,
    save_on_stop: bool,
    answer_checkpoint_signal: bool,
    forget_optimizer: bool,
}

fn parse_args(args: &[String]) -> Result<Args, String> {
    let mut parsed = Args {
        steps: 2000,
        every: 100,
        seed: 42,
        delay_ms: 0,
        save_on_stop: true,
        answer_checkpoint_signal: true,
        forget_optimizer: false,
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        if flag == "--help" || flag == "-h" {
            return Err(String::new());
        }
        if flag == "--no-save-on-stop" {
            parsed.save_on_stop = false;
            continue;
        }
        if flag == "--ignore-checkpoint-signal" {
            parsed.answer_checkpoint_signal = false;
            continue;
        }
        if flag == "--forget-optimizer-on-resume" {
            parsed.forget_optimizer = true;
            continue;
        }
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number: u64 = value
            .parse()
            .map_err(|_| format!("{flag}: {value:?} is not a non-negative integer"))?;
        match flag.as_str() {
            "--steps" => parsed.steps = number,
            "--checkpoint-every" if number == 0 => {
                return Err("--checkpoint-every must be >= 1".into())
            }
            "--checkpoint-every" => parsed.every = number,
            "--seed" => parsed.seed = number,
            "--step-delay-ms" => parsed.delay_ms = number,
            other => return Err(format!("unknown option {other:?}")),
        }
    }
    Ok(parsed)
}

fn digest(state: &State) -> String {
    let mut hasher = Sha256::new();
    for p in &state.params {
        hasher.update(p.to_le_bytes());
    }
    hex::encode(hasher.finalize())
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args = match parse_args(&args) {
        Ok(a) => a,
        Err(e) if e.is_empty() => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("qm-trainer: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let dir = PathBuf::from(
        std::env::var_os("QM_CHECKPOINT_DIR").unwrap_or_else(|| "checkpoints".into()),
    );
    let stop = Arc::new(AtomicBool::new(false));
    // SIGUSR1 (checkpoint now) sets `save_now`; ignoring it still needs a
    // handler (its default action would end the process).
    let save_now = Arc::new(AtomicBool::new(false));
    let ignored = Arc::new(AtomicBool::new(false));
    let usr1 = if args.answer_checkpoint_signal {
        &save_now
    } else {
        &ignored
    };
    for (signal, flag) in [
        (signal_hook::consts::SIGTERM, &stop),
        (signal_hook::consts::SIGINT, &stop),
        (signal_hook::consts::SIGUSR1, usr1),
    ] {
        if let Err(e) = signal_hook::flag::register(signal, Arc::clone(flag)) {
            eprintln!("qm-trainer: cannot handle signal {signal}: {e}");
            return ExitCode::from(3);
        }
    }
    let data = Data::generate(args.seed);
    let mut state = match checkpoint::load(&dir) {
        Ok(Some(mut state)) => {
            say(&format!(
                "resumed from step {} ({})",
                state.step,
                dir.display()
            ));
            if args.forget_optimizer {
                // The mistake resume drills exist to catch: the model's
                // parameters come back, the optimizer's state does not.
                state.velocity.iter_mut().for_each(|v| *v = 0.0);
                say("optimizer state not restored (--forget-optimizer-on-resume)");
            }
            state
        }
        Ok(None) => {
            say("starting from step 0");
            State::initial(args.seed)
        }
        Err(e) => {
            eprintln!("qm-trainer: {e}");
            return ExitCode::from(3);
        }
    };
    let save = |state: &State| -> Result<(), ExitCode> {
        checkpoint::save(&dir, state).map_err(|e| {
            eprintln!("qm-trainer: cannot save checkpoint: {e}");
            ExitCode::from(3)
        })
    };
    let mut loss = f64::NAN;
    while state.step < args.steps {
        if stop.load(Ordering::SeqCst) {
            if !args.save_on_stop {
                say(&format!("stopping at step {}: nothing saved", state.step));
                return ExitCode::from(143);
            }
            if let Err(code) = save(&state) {
                return code;
            }
            say(&format!(
                "stopping at step {}: checkpoint saved",
                state.step
            ));
            return ExitCode::SUCCESS;
        }
        loss = state.train_step(&data);
        let asked = save_now.swap(false, Ordering::SeqCst);
        if state.step % args.every == 0 || asked {
            if let Err(code) = save(&state) {
                return code;
            }
            let why = if asked { " (asked)" } else { "" };
            say(&format!(
                "checkpoint step={} loss={loss:.6}{why}",
                state.step
            ));
        }
        if args.delay_ms > 0 {
            std::thread::sleep(Duration::from_millis(args.delay_ms));
        }
    }
    if let Err(code) = save(&state) {
        return code;
    }
    say(&format!("done steps={} loss={loss:.6}", state.step));
    let digest = digest(&state);
    say(&format!("digest={digest}"));
    if let Some(path) = std::env::var_os("QM_RESULT_FILE") {
        if let Err(e) = std::fs::write(&path, format!("{digest}\n")) {
            eprintln!("qm-trainer: cannot write the result to {path:?}: {e}");
            return ExitCode::from(3);
        }
    }
    ExitCode::SUCCESS
}
