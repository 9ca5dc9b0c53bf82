//! The fleet the controller benchmarks (`controller`: fake API server; `cluster`: real one)
//! generate, so that their figures compare like with like: `tenant-N.git` repositories, each with
//! CDTargets valid under the default policy, [`DOCS_PER_FILE`] documents to a file, in the agent
//! mode asked for (`spec.mode`) or in the policy's default (no `spec.mode`).

use std::thread;

use cdtarget::api::AgentMode;

use crate::common::Upstream;

/// The token Secret every CDTarget references.
pub const TOKEN: &str = "azp-token";
/// CDTarget documents per file in a generated repository.
pub const DOCS_PER_FILE: usize = 5;

/// Creates `registrations` repositories `tenant-N.git`, each with `targets` CDTargets in files of
/// [`DOCS_PER_FILE`] documents under `deploy/`, on as many threads as there are CPUs; `mode` is
/// written into every CDTarget's `spec.mode` (`None`: left out, the policy's default applies).
pub fn generate(upstream: &Upstream, registrations: usize, targets: usize, mode: Option<AgentMode>) {
    let threads = thread::available_parallelism().map_or(4, |n| n.get()).min(16);
    thread::scope(|scope| {
        for worker in 0..threads {
            scope.spawn(move || {
                for i in (worker..registrations).step_by(threads) {
                    let repo = upstream.create(&format!("tenant-{i}.git"));
                    let files: Vec<(String, String)> = (0..targets)
                        .collect::<Vec<_>>()
                        .chunks(DOCS_PER_FILE)
                        .enumerate()
                        .map(|(file, chunk)| {
                            let docs: Vec<String> = chunk.iter().map(|&t| cdtarget_yaml(i, t, mode)).collect();
                            (format!("deploy/agents-{file}.yaml"), docs.join("---\n"))
                        })
                        .collect();
                    let files: Vec<(&str, &str)> = files.iter().map(|(p, c)| (p.as_str(), c.as_str())).collect();
                    repo.commit_and_push(&files, "agents");
                }
            });
        }
    });
}

/// CDTarget `agents-<target>` of repository `repo`, valid under the default policy (which allows
/// both modes), with `spec.mode: <mode>` when `mode` is given.
pub fn cdtarget_yaml(repo: usize, target: usize, mode: Option<AgentMode>) -> String {
    let ip = format!("10.{}.{}.{}", repo / 250 % 250, repo % 250, target % 250 + 1);
    let mode = mode.map_or_else(String::new, |mode| format!("\n  mode: {}", mode.as_str()));
    format!(
        "apiVersion: cdtarget.io/v1alpha1\nkind: CDTarget\nmetadata:\n  name: agents-{target}\nspec:{mode}\n  \
         ip: [\"{ip}\", \"192.168.{}.0/24\"]\n  agentImage: ghcr.io/acme/azp-agent:1\n  tokenRef: {TOKEN}\n  \
         minReplicaCount: 1\n  maxReplicaCount: 5\n  config:\n    url: https://dev.azure.com/acme\n    \
         poolName: pool-{target}\n",
        target % 250
    )
}
