//! Several environments stepped in parallel, one thread each, while the network decides for
//! all of them in one batch on the calling thread (libtorch stays on one thread; the
//! simulators use the other cores).

use ecn_env::tuning::{EnvError, Step, TuningEnv};

/// The result of stepping one environment, `None` where it was given no actions.
pub type StepResults = Vec<Option<Result<Step, EnvError>>>;

/// Step every environment that has actions (`Some`) in parallel, running `during` on the
/// calling thread meanwhile (the learner's gradient steps); environments given `None` are
/// left alone and get `None` back.
pub fn step_all<R>(
    envs: &mut [TuningEnv],
    actions: &[Option<Vec<usize>>],
    during: impl FnOnce() -> R,
) -> (StepResults, R) {
    if envs.len() == 1 {
        let result = actions[0].as_ref().map(|a| envs[0].step(a));
        return (vec![result], during());
    }
    std::thread::scope(|scope| {
        let handles: Vec<_> =
            envs.iter_mut().zip(actions).map(|(env, a)| a.as_ref().map(|a| scope.spawn(move || env.step(a)))).collect();
        let r = during();
        (handles.into_iter().map(|h| h.map(|h| h.join().expect("environment step panicked"))).collect(), r)
    })
}

/// Run every environment's current episode to its end under `decide`, which maps a batch of
/// observations (row-major, all environments together) and each row's environment index
/// to one action per row.
pub fn run_episodes(
    envs: &mut [TuningEnv],
    first_obs: Vec<Vec<f32>>,
    mut decide: impl FnMut(&[f32], &[usize]) -> Vec<usize>,
) -> Result<(), EnvError> {
    let mut obs: Vec<Option<Vec<f32>>> = first_obs.into_iter().map(Some).collect();
    loop {
        let mut batch = Vec::new();
        let mut owner = Vec::new();
        for (i, o) in obs.iter().enumerate() {
            if let Some(o) = o {
                batch.extend_from_slice(o);
                owner.extend(std::iter::repeat_n(i, envs[i].agents()));
            }
        }
        if owner.is_empty() {
            return Ok(());
        }
        let chosen = decide(&batch, &owner);
        let mut actions: Vec<Option<Vec<usize>>> = vec![None; envs.len()];
        for (a, &i) in chosen.into_iter().zip(&owner) {
            actions[i].get_or_insert_with(Vec::new).push(a);
        }
        for (i, result) in step_all(envs, &actions, || ()).0.into_iter().enumerate() {
            let Some(result) = result else { continue };
            let step = result?;
            obs[i] = (!step.terminated && !step.truncated).then_some(step.observations);
        }
    }
}
