//! Runs a [`Plan`] through the client, in order, stopping at the first failure (so a rotated key
//! is never removed unless its successor was added).

use super::client::GitLabClient;
use super::error::{ErrorKind, GitLabError};
use super::plan::{Call, Plan};

/// What running a plan left on the project.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Executed {
    /// The deploy key now in place, if the plan manages one.
    pub deploy_key_id: Option<i64>,
    /// The hook now in place, if the plan manages one.
    pub hook_id: Option<i64>,
    /// Writing requests sent (a `can_push` fix-up after a create counts too).
    pub writes: usize,
    /// Removals that found the key or hook already gone (404).
    pub already_gone: usize,
}

/// Runs every call of `plan`. A 404 on a removal counts as done; a hook that vanished between
/// listing and editing is created again.
pub async fn execute(client: &GitLabClient, plan: &Plan) -> Result<Executed, GitLabError> {
    let project = plan.project_id;
    let mut done = Executed { deploy_key_id: plan.deploy_key_id, hook_id: plan.hook_id, ..Executed::default() };
    for call in &plan.calls {
        done.writes += 1;
        match call {
            Call::CreateKey { title, key, .. } => {
                let created = client.create_deploy_key(project, title, key, false).await?;
                // GitLab answers with the existing link when the project already had this exact
                // key, keeping its `can_push`: correct it.
                if created.can_push == Some(true) {
                    done.writes += 1;
                    client.set_deploy_key_can_push(project, created.id, false).await?;
                }
                done.deploy_key_id = Some(created.id);
            }
            Call::FixKeyCanPush { key_id } => {
                client.set_deploy_key_can_push(project, *key_id, false).await?;
            }
            Call::DeleteKey { key_id, .. } => match client.delete_deploy_key(project, *key_id).await {
                Err(e) if e.kind == ErrorKind::NotFound => done.already_gone += 1,
                other => other?,
            },
            Call::CreateHook(params) => done.hook_id = Some(client.create_hook(project, params).await?.id),
            Call::EditHook { hook_id, params, .. } => match client.edit_hook(project, *hook_id, params).await {
                Ok(hook) => done.hook_id = Some(hook.id),
                Err(e) if e.kind == ErrorKind::NotFound => {
                    done.writes += 1;
                    done.hook_id = Some(client.create_hook(project, params).await?.id);
                }
                Err(e) => return Err(e),
            },
            Call::TestHook { hook_id } => {
                // A failed test leaves the hook disabled, which the next pass sees again; the
                // sync itself did its part.
                if let Err(e) = client.test_hook(project, *hook_id).await {
                    tracing::info!(project, hook_id, error = %e, "test delivery did not enable the hook");
                }
            }
            Call::DeleteHook { hook_id, .. } => match client.delete_hook(project, *hook_id).await {
                Err(e) if e.kind == ErrorKind::NotFound => done.already_gone += 1,
                other => other?,
            },
        }
    }
    Ok(done)
}
