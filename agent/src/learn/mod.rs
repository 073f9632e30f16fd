//! Learning to tune: Double DQN on the tuning environment, shared by every queue.
//!
//! - [`replay`]: the replay buffer (ACC's global pool).
//! - [`ddqn`]: online and target networks, Huber loss, Adam, ε-greedy.
//! - [`lockstep`]: step several environments in parallel with one batched network call.
//! - [`trainer`]: the training loop behind `ecn-tuner train`, with periodic evaluation,
//!   the training curve, and checkpoints.
//! - [`offline`]: `train --telemetry`: logged telemetry → transitions → discrete CQL.

pub mod ddqn;
pub mod lockstep;
pub mod offline;
pub mod replay;
pub mod trainer;
