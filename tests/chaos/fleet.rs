//! The replicas under chaos: three slots, each holding a live `weir serve --gateway` process (or
//! none while it is down after a `kill -9`), with a generation that tells a client whether the
//! process it spoke to was killed under it; and their RSS and open fds from `/proc`.

use crate::gw::Replica;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

struct Slot {
    replica: Option<Replica>,
    generation: u64,
}

/// Which process a request went to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    pub slot: usize,
    pub generation: u64,
    pub addr: SocketAddr,
}

#[derive(Clone)]
pub struct Fleet {
    config: PathBuf,
    /// Each slot's extra environment (its keychain service for the team secrets).
    envs: Arc<Vec<Vec<(String, String)>>>,
    slots: Arc<Mutex<Vec<Slot>>>,
    next: Arc<Mutex<usize>>,
}

/// One process's figures.
#[derive(Debug, Clone, Copy)]
pub struct Figures {
    pub pid: u32,
    pub rss_kib: u64,
    pub fds: usize,
}

impl Fleet {
    /// One replica per entry of `envs`, each started with that extra environment.
    pub async fn start(config: PathBuf, envs: Vec<Vec<(String, String)>>) -> Fleet {
        let mut slots = Vec::new();
        for env in &envs {
            let (c, env) = (config.clone(), env.clone());
            let r = tokio::task::spawn_blocking(move || Replica::start_env(&c, &env))
                .await
                .unwrap();
            slots.push(Slot {
                replica: Some(r),
                generation: 0,
            });
        }
        Fleet {
            config,
            envs: Arc::new(envs),
            slots: Arc::new(Mutex::new(slots)),
            next: Arc::default(),
        }
    }

    /// The next live replica, round robin (as a load balancer spreads clients).
    pub fn pick(&self) -> Option<Target> {
        let slots = self.slots.lock().unwrap();
        let mut next = self.next.lock().unwrap();
        for _ in 0..slots.len() {
            let i = *next % slots.len();
            *next += 1;
            if let Some(r) = &slots[i].replica {
                return Some(Target {
                    slot: i,
                    generation: slots[i].generation,
                    addr: r.addr,
                });
            }
        }
        None
    }

    /// Whether `t`'s process is still the one running in its slot.
    pub fn alive(&self, t: &Target) -> bool {
        let slots = self.slots.lock().unwrap();
        slots[t.slot].generation == t.generation && slots[t.slot].replica.is_some()
    }

    /// `kill -9` of the process in `slot` (its generation ends).
    pub async fn kill9(&self, slot: usize) {
        let victim = {
            let mut slots = self.slots.lock().unwrap();
            slots[slot].generation += 1;
            slots[slot].replica.take()
        };
        if let Some(mut r) = victim {
            tokio::task::spawn_blocking(move || r.kill9())
                .await
                .unwrap();
        }
    }

    /// Starts a fresh process in an empty `slot`.
    pub async fn restart(&self, slot: usize) {
        let (c, env) = (self.config.clone(), self.envs[slot].clone());
        let r = tokio::task::spawn_blocking(move || Replica::start_env(&c, &env))
            .await
            .unwrap();
        let mut slots = self.slots.lock().unwrap();
        slots[slot].generation += 1;
        slots[slot].replica = Some(r);
    }

    /// Every slot's figures (`None` for an empty slot).
    pub fn figures(&self) -> Vec<Option<Figures>> {
        let slots = self.slots.lock().unwrap();
        slots
            .iter()
            .map(|s| s.replica.as_ref().map(|r| figures(r.pid())))
            .collect()
    }

    /// How many processes each slot has run (1 = never restarted).
    pub fn generations(&self) -> Vec<u64> {
        let slots = self.slots.lock().unwrap();
        // Each kill and each restart add one: processes run = restarts + 1.
        slots.iter().map(|s| s.generation / 2 + 1).collect()
    }

    /// Every live replica's admin address, by slot (`None`: down).
    pub fn admins(&self) -> Vec<Option<SocketAddr>> {
        let slots = self.slots.lock().unwrap();
        slots
            .iter()
            .map(|s| s.replica.as_ref().map(|r| r.admin))
            .collect()
    }

    /// Every live replica's log, for a failure message.
    pub fn logs(&self) -> String {
        let slots = self.slots.lock().unwrap();
        slots
            .iter()
            .filter_map(|s| s.replica.as_ref().map(|r| r.log()))
            .map(|l| l.lines().rev().take(40).collect::<Vec<_>>().join("\n"))
            .collect::<Vec<_>>()
            .join("\n----\n")
    }
}

/// `VmRSS` and the number of open fds of `pid`.
pub fn figures(pid: u32) -> Figures {
    let rss_kib = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0);
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0);
    Figures { pid, rss_kib, fds }
}
