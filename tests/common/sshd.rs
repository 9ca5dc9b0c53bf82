//! OpenSSH's sshd on loopback, serving the bare repositories over `ssh://` to the current user.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;

use super::process::{self, STARTUP_DEADLINE};
use super::{HarnessError, TestDir, test_dir};

const SSHD: &str = "/usr/sbin/sshd";

/// The passphrase of [`KeyKind::Ed25519Passphrase`].
pub const KEY_PASSPHRASE: &str = "sekret";

/// The client key formats the server accepts (all listed in its `authorized_keys`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyKind {
    /// ed25519, OpenSSH format (`BEGIN OPENSSH PRIVATE KEY`), no passphrase.
    Ed25519,
    /// RSA 3072 in the classic PEM format (`BEGIN RSA PRIVATE KEY`), no passphrase.
    RsaPem,
    /// The same RSA 3072 key in OpenSSH format.
    RsaOpenSsh,
    /// ed25519, OpenSSH format, encrypted with the passphrase [`KEY_PASSPHRASE`].
    Ed25519Passphrase,
    /// ECDSA on P-256, OpenSSH format, no passphrase.
    EcdsaP256,
}

impl KeyKind {
    /// Every kind, in a fixed order.
    pub const ALL: [KeyKind; 5] =
        [KeyKind::Ed25519, KeyKind::RsaPem, KeyKind::RsaOpenSsh, KeyKind::Ed25519Passphrase, KeyKind::EcdsaP256];

    fn file_name(self) -> &'static str {
        match self {
            KeyKind::Ed25519 => "client_ed25519",
            KeyKind::RsaPem => "client_rsa_pem",
            KeyKind::RsaOpenSsh => "client_rsa_openssh",
            KeyKind::Ed25519Passphrase => "client_ed25519_passphrase",
            KeyKind::EcdsaP256 => "client_ecdsa_p256",
        }
    }
}

/// A client key pair.
#[derive(Clone, Debug)]
pub struct ClientKey {
    /// Which format this is; `None` for [`Sshd::an_unauthorized_key`].
    pub kind: Option<KeyKind>,
    /// The private key file's text (PEM or OpenSSH armour), as a deploy-key Secret would hold it.
    pub private_key_pem: String,
    /// The passphrase protecting the private key, if any.
    pub passphrase: Option<String>,
    /// The public key line (`ssh-ed25519 AAAA... comment`).
    pub public_key: String,
    /// The private key written to the server's directory (mode 0600), for `ssh -i`.
    pub path: PathBuf,
}

/// `sshd -D -e` on `127.0.0.1:<port>` with its own ed25519 host key and `authorized_keys` holding
/// every [`KeyKind`], each restricted (`restrict`) to git commands through `git-shell`. The
/// login user is the user running the tests (root in CI). Killed, with its per-connection
/// processes, on drop.
pub struct Sshd {
    dir: TestDir,
    port: u16,
    child: Child,
    keys: Vec<ClientKey>,
    unauthorized: ClientKey,
}

impl Sshd {
    /// Generates the host key and the server's files, starts sshd and waits (at most 10 s) until
    /// it sends its SSH banner. [`HarnessError::Unavailable`] when `/usr/sbin/sshd` or
    /// `ssh-keygen` is not installed (turn it into a SKIP with [`super::skip_or_fail`]).
    pub fn start() -> Result<Sshd, HarnessError> {
        if !Path::new(SSHD).is_file() {
            return Err(HarnessError::Unavailable(format!(
                "{SSHD} is not installed (apt-get install -y openssh-server)"
            )));
        }
        let generated = client_keys()?;
        if process::running_as_root() {
            // sshd started by root refuses to run without its privilege separation directory.
            std::fs::create_dir_all("/run/sshd").map_err(|e| HarnessError::Failed(format!("mkdir /run/sshd: {e}")))?;
            let _ = std::fs::set_permissions("/run/sshd", std::fs::Permissions::from_mode(0o755));
        }
        let dir = test_dir();
        let keys: Vec<ClientKey> =
            generated.authorized.iter().map(|key| key.write_private_key(dir.path())).collect::<Result<_, _>>()?;
        let unauthorized = generated.unauthorized.write_private_key(dir.path())?;
        let authorized_keys: String = keys.iter().map(|key| restricted_to_git(&key.public_key)).collect();
        std::fs::write(dir.path().join("authorized_keys"), authorized_keys).map_err(failed("write authorized_keys"))?;
        std::fs::set_permissions(dir.path().join("authorized_keys"), std::fs::Permissions::from_mode(0o644))
            .map_err(failed("chmod authorized_keys"))?;
        generate_host_key(dir.path())?;
        let (port, child) = spawn_on_some_port(dir.path(), None)?;
        Ok(Sshd { dir, port, child, keys, unauthorized })
    }

    /// The port sshd listens on (127.0.0.1 only).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The pid of the sshd listener process.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The login user: the user running the tests.
    pub fn user(&self) -> &'static str {
        current_user()
    }

    /// `ssh://USER@127.0.0.1:PORT/abs/path` for a bare repository given by its absolute path.
    pub fn url(&self, bare_repo: &Path) -> String {
        assert!(bare_repo.is_absolute(), "ssh repository paths are absolute on the server: {}", bare_repo.display());
        format!("ssh://{}@127.0.0.1:{}{}", self.user(), self.port, bare_repo.display())
    }

    /// The current host key as a known_hosts line: `[127.0.0.1]:PORT ssh-ed25519 AAAA...`.
    pub fn known_hosts(&self) -> String {
        format!("[127.0.0.1]:{} {}", self.port, self.host_public_key())
    }

    /// Writes [`known_hosts`](Self::known_hosts) to a file in the server's directory and returns
    /// its path (for `ssh -o UserKnownHostsFile=...`).
    pub fn known_hosts_file(&self) -> PathBuf {
        let path = self.dir.path().join("known_hosts");
        std::fs::write(&path, format!("{}\n", self.known_hosts())).expect("write known_hosts");
        path
    }

    /// The host public key without comment: `ssh-ed25519 AAAA...`.
    pub fn host_public_key(&self) -> String {
        let line = std::fs::read_to_string(self.dir.path().join("host_ed25519.pub")).expect("read host key");
        line.split_whitespace().take(2).collect::<Vec<_>>().join(" ")
    }

    /// The host key's fingerprint as `ssh-keygen -l` prints it: `SHA256:` and unpadded base64.
    pub fn host_key_fingerprint(&self) -> String {
        let output = Command::new("ssh-keygen")
            .arg("-lf")
            .arg(self.dir.path().join("host_ed25519.pub"))
            .output()
            .expect("run ssh-keygen -l");
        let text = String::from_utf8_lossy(&output.stdout);
        text.split_whitespace().nth(1).expect("fingerprint in ssh-keygen -l output").to_string()
    }

    /// The authorized client key of `kind`.
    pub fn client_key(&self, kind: KeyKind) -> ClientKey {
        self.keys.iter().find(|key| key.kind == Some(kind)).expect("every kind is generated").clone()
    }

    /// A valid ed25519 key that is not in `authorized_keys`.
    pub fn an_unauthorized_key(&self) -> ClientKey {
        self.unauthorized.clone()
    }

    /// Stops sshd (and its connections), replaces its host key with a new one and starts it
    /// again, on the same port when that port can be bound again. sshd binds with SO_REUSEADDR,
    /// so that works unless another process took the port in between; then sshd is started on a
    /// new port. Returns the port now in use; known_hosts lines taken before the restart name
    /// the old key and must fail against the new server either way.
    pub fn restart_with_new_host_key(&mut self) -> Result<u16, HarnessError> {
        process::kill_with_children(&mut self.child);
        for file in ["host_ed25519", "host_ed25519.pub"] {
            std::fs::remove_file(self.dir.path().join(file)).map_err(failed("remove the old host key"))?;
        }
        generate_host_key(self.dir.path())?;
        let (port, child) = spawn_on_some_port(self.dir.path(), Some(self.port))?;
        self.port = port;
        self.child = child;
        Ok(port)
    }

    /// sshd's log so far (stderr, `LogLevel VERBOSE`), for assertions and failure messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("sshd.log")).unwrap_or_default()
    }

    /// The server's own directory (host key, config, `authorized_keys`, log).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        process::kill_with_children(&mut self.child);
    }
}

/// A `GIT_SSH_COMMAND` for the OpenSSH client: only `key`, host key checked strictly against
/// `known_hosts_file`, no agent, no prompts, no user or system ssh config. Keys with a
/// passphrase cannot be used this way (no prompt in batch mode).
pub fn git_ssh_command(key: &ClientKey, known_hosts_file: &Path) -> String {
    format!(
        "ssh -F /dev/null -i {} -o IdentitiesOnly=yes -o IdentityAgent=none -o BatchMode=yes \
         -o StrictHostKeyChecking=yes -o UserKnownHostsFile={} -o GlobalKnownHostsFile=/dev/null",
        key.path.display(),
        known_hosts_file.display()
    )
}

// === key material ===

/// Client keys generated once per test process (RSA generation is the slow part) and written to
/// each server's directory.
struct GeneratedKeys {
    authorized: Vec<ClientKey>,
    unauthorized: ClientKey,
}

impl ClientKey {
    fn write_private_key(&self, dir: &Path) -> Result<ClientKey, HarnessError> {
        let path = dir.join(self.kind.map_or("client_unauthorized", KeyKind::file_name));
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(failed("create private key file"))?;
        std::io::Write::write_all(&mut file, self.private_key_pem.as_bytes()).map_err(failed("write private key"))?;
        Ok(ClientKey { path, ..self.clone() })
    }
}

fn client_keys() -> Result<&'static GeneratedKeys, HarnessError> {
    static KEYS: OnceLock<Result<GeneratedKeys, String>> = OnceLock::new();
    match KEYS.get_or_init(generate_client_keys) {
        Ok(keys) => Ok(keys),
        Err(why) => Err(HarnessError::Unavailable(why.clone())),
    }
}

fn generate_client_keys() -> Result<GeneratedKeys, String> {
    let dir = test_dir();
    let keygen = |file: &str, args: &[&str]| -> Result<(), String> {
        let output = Command::new("ssh-keygen")
            .args(["-q", "-C", &format!("cdtarget-test-{file}"), "-f"])
            .arg(dir.path().join(file))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("ssh-keygen is not installed ({e})"))?;
        if output.status.success() {
            Ok(())
        } else {
            Err(format!("ssh-keygen {file}: {}", String::from_utf8_lossy(&output.stderr)))
        }
    };
    keygen("client_ed25519", &["-t", "ed25519", "-N", ""])?;
    keygen("client_rsa_pem", &["-t", "rsa", "-b", "3072", "-m", "PEM", "-N", ""])?;
    std::fs::copy(dir.path().join("client_rsa_pem"), dir.path().join("client_rsa_openssh"))
        .map_err(|e| e.to_string())?;
    std::fs::copy(dir.path().join("client_rsa_pem.pub"), dir.path().join("client_rsa_openssh.pub"))
        .map_err(|e| e.to_string())?;
    // Rewriting the (empty) passphrase saves the key in the default, OpenSSH, format.
    let rsa_openssh = dir.path().join("client_rsa_openssh").to_string_lossy().into_owned();
    let output = Command::new("ssh-keygen")
        .args(["-q", "-p", "-P", "", "-N", "", "-f", &rsa_openssh])
        .output()
        .map_err(|e| e.to_string())?;
    if !output.status.success() {
        return Err(format!("ssh-keygen -p: {}", String::from_utf8_lossy(&output.stderr)));
    }
    keygen("client_ed25519_passphrase", &["-t", "ed25519", "-N", KEY_PASSPHRASE])?;
    keygen("client_ecdsa_p256", &["-t", "ecdsa", "-b", "256", "-N", ""])?;
    keygen("client_unauthorized", &["-t", "ed25519", "-N", ""])?;
    let read = |file: &str, kind: Option<KeyKind>| -> Result<ClientKey, String> {
        let private_key_pem = std::fs::read_to_string(dir.path().join(file)).map_err(|e| e.to_string())?;
        let public_key = std::fs::read_to_string(dir.path().join(format!("{file}.pub")))
            .map_err(|e| e.to_string())?
            .trim()
            .to_string();
        let passphrase = (kind == Some(KeyKind::Ed25519Passphrase)).then(|| KEY_PASSPHRASE.to_string());
        Ok(ClientKey { kind, private_key_pem, passphrase, public_key, path: PathBuf::new() })
    };
    let authorized = KeyKind::ALL.iter().map(|&kind| read(kind.file_name(), Some(kind))).collect::<Result<_, _>>()?;
    Ok(GeneratedKeys { authorized, unauthorized: read("client_unauthorized", None)? })
}

/// An `authorized_keys` line allowing `public_key` only git's commands, through git-shell.
fn restricted_to_git(public_key: &str) -> String {
    let git_shell = process::find_on_path("git-shell").or_else(|| {
        let exec_path = Command::new("git").arg("--exec-path").output().ok()?;
        let candidate = PathBuf::from(String::from_utf8_lossy(&exec_path.stdout).trim()).join("git-shell");
        candidate.is_file().then_some(candidate)
    });
    match git_shell {
        Some(git_shell) => {
            format!("restrict,command=\"{} -c \\\"$SSH_ORIGINAL_COMMAND\\\"\" {public_key}\n", git_shell.display())
        }
        // Without git-shell the key is still restricted (no forwarding, no pty), but may run any command.
        None => format!("restrict {public_key}\n"),
    }
}

fn generate_host_key(dir: &Path) -> Result<(), HarnessError> {
    let output = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "cdtarget-test-host", "-f"])
        .arg(dir.join("host_ed25519"))
        .stdin(Stdio::null())
        .output()
        .map_err(|e| HarnessError::Unavailable(format!("ssh-keygen is not installed ({e})")))?;
    if !output.status.success() {
        return Err(HarnessError::Failed(format!("ssh-keygen host key: {}", String::from_utf8_lossy(&output.stderr))));
    }
    Ok(())
}

// === the daemon ===

/// Starts sshd on `preferred` (or a free port), retrying on new free ports when the port cannot be
/// bound (another process took it between the probe and sshd's bind).
fn spawn_on_some_port(dir: &Path, preferred: Option<u16>) -> Result<(u16, Child), HarnessError> {
    let mut last_error = String::new();
    for attempt in 0..4 {
        let port = match (attempt, preferred) {
            (0, Some(port)) => port,
            _ => process::free_port(),
        };
        match spawn_on(dir, port) {
            Ok(child) => return Ok((port, child)),
            Err(error) => last_error = error,
        }
    }
    Err(HarnessError::Failed(last_error))
}

fn spawn_on(dir: &Path, port: u16) -> Result<Child, String> {
    let config = dir.join("sshd_config");
    let d = dir.display();
    std::fs::write(
        &config,
        format!(
            "Port {port}\n\
             ListenAddress 127.0.0.1\n\
             HostKey {d}/host_ed25519\n\
             PidFile {d}/sshd.pid\n\
             AuthorizedKeysFile {d}/authorized_keys\n\
             StrictModes no\n\
             UsePAM no\n\
             PasswordAuthentication no\n\
             KbdInteractiveAuthentication no\n\
             PubkeyAuthentication yes\n\
             AuthenticationMethods publickey\n\
             PermitRootLogin prohibit-password\n\
             AcceptEnv GIT_PROTOCOL\n\
             PrintMotd no\n\
             UseDNS no\n\
             MaxStartups 100\n\
             LogLevel VERBOSE\n"
        ),
    )
    .map_err(|e| format!("write sshd_config: {e}"))?;
    if supports_per_source_penalties(&config) {
        // OpenSSH >= 9.8 refuses connections for a while from an address that failed to
        // authenticate; every test connects from 127.0.0.1, and some fail on purpose.
        let mut file = File::options().append(true).open(&config).map_err(|e| format!("open sshd_config: {e}"))?;
        std::io::Write::write_all(&mut file, b"PerSourcePenalties no\n")
            .map_err(|e| format!("write sshd_config: {e}"))?;
    }
    let log_path = dir.join("sshd.log");
    let log = File::options().create(true).append(true).open(&log_path).map_err(|e| format!("open sshd.log: {e}"))?;
    let mut child = Command::new(SSHD)
        .args(["-D", "-e", "-f"])
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .map_err(|e| format!("spawn {SSHD}: {e}"))?;
    let ready = process::wait_until_serving(port, STARTUP_DEADLINE, process::sends_ssh_banner, || {
        matches!(child.try_wait(), Ok(None))
    });
    match ready {
        Ok(()) => Ok(child),
        Err(why) => {
            process::kill_with_children(&mut child);
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            Err(format!("sshd {why}; log:\n{log}"))
        }
    }
}

/// Whether this sshd knows `PerSourcePenalties` (checked once, with `sshd -t`).
fn supports_per_source_penalties(config: &Path) -> bool {
    static SUPPORTED: OnceLock<bool> = OnceLock::new();
    *SUPPORTED.get_or_init(|| {
        Command::new(SSHD)
            .args(["-t", "-o", "PerSourcePenalties=no", "-f"])
            .arg(config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    })
}

/// The user running the tests, who is also the ssh login user.
pub fn current_user() -> &'static str {
    static USER: OnceLock<String> = OnceLock::new();
    USER.get_or_init(|| {
        let output = Command::new("id").arg("-un").output().expect("run id -un");
        let name = String::from_utf8_lossy(&output.stdout).trim().to_string();
        assert!(!name.is_empty(), "id -un printed no user name");
        name
    })
}

fn failed(what: &'static str) -> impl Fn(std::io::Error) -> HarnessError {
    move |e| HarnessError::Failed(format!("{what}: {e}"))
}
