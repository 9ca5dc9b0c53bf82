//! Self-tests of the fake Azure DevOps (`tests/common/fake_azure_devops.rs`): each plays one rule
//! of `../shared/contracts/azure-devops.md` over real HTTPS with reqwest, and the job request
//! JSON is read the way KEDA v2.21.0's `azure-pipelines` scaler decodes it.

use std::time::Duration;

use reqwest::Method;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};

use crate::common::fake_azure_devops::{
    Credential, DEFAULT_ORG, FakeAzureDevOps, Fault, JobResult, PoolAccess, RateMode, Scope, TOP_CAP, Unauthenticated,
};

/// A PAT with "Agent Pools (Read & manage)" on [`DEFAULT_ORG`], owned by `ci-bot`.
const PAT: &str = "manage-pat-5d3a9c0e7f";
/// A PAT with "Agent Pools (Read)" only, owned by `reader`.
const READ_PAT: &str = "read-pat-41b2e8d6aa";

/// A fake with [`PAT`], [`READ_PAT`] and pool `tenant-a`, and a client that trusts its CA and
/// follows no redirect.
fn setup() -> (FakeAzureDevOps, reqwest::Client, i32) {
    let fake = FakeAzureDevOps::start();
    fake.add_pat(DEFAULT_ORG, "ci-bot", PAT, &[Scope::AgentPoolsManage]);
    fake.add_pat(DEFAULT_ORG, "reader", READ_PAT, &[Scope::AgentPoolsRead]);
    let pool = fake.create_pool(DEFAULT_ORG, "tenant-a");
    let http = client(&fake, reqwest::redirect::Policy::none());
    (fake, http, pool)
}

fn client(fake: &FakeAzureDevOps, redirects: reqwest::redirect::Policy) -> reqwest::Client {
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let pem = std::fs::read(fake.ca_pem_path()).expect("read the CA file");
    let ca = reqwest::Certificate::from_pem(&pem).expect("a PEM certificate");
    reqwest::Client::builder()
        .tls_certs_only([ca])
        .redirect(redirects)
        .timeout(Duration::from_secs(20))
        .build()
        .expect("HTTP client")
}

struct Reply {
    status: u16,
    headers: HeaderMap,
    text: String,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("JSON expected ({e}): {}", self.text))
    }

    fn header(&self, name: &str) -> &str {
        self.headers.get(name).map(|v| v.to_str().unwrap()).unwrap_or_else(|| panic!("no {name} in {:?}", self.headers))
    }

    fn all(&self, name: &str) -> Vec<String> {
        self.headers.get_all(name).iter().map(|v| v.to_str().unwrap().to_owned()).collect()
    }
}

/// Sends a request as KEDA does (Basic with an empty user, no other header), plus `Suppress`
/// when asked and a JSON body when given.
async fn send(
    http: &reqwest::Client,
    method: Method,
    url: &str,
    pat: Option<&str>,
    suppress: bool,
    body: Option<Value>,
) -> Reply {
    let mut request = http.request(method, url);
    if let Some(pat) = pat {
        request = request.basic_auth("", Some(pat));
    }
    if suppress {
        request = request.header("X-TFS-FedAuthRedirect", "Suppress");
    }
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.unwrap_or_else(|e| panic!("{url}: {e}"));
    let status = response.status().as_u16();
    let headers = response.headers().clone();
    let text = response.text().await.expect("read the body");
    Reply { status, headers, text }
}

async fn get(http: &reqwest::Client, url: &str, pat: &str) -> Reply {
    send(http, Method::GET, url, Some(pat), false, None).await
}

/// Whether `text` is an RFC 3339 UTC timestamp as Go's `time.Time` decodes it
/// (`YYYY-MM-DDTHH:MM:SS[.fraction]Z`).
fn is_rfc3339_utc(text: &str) -> bool {
    let bytes = text.as_bytes();
    let digits = |range: std::ops::Range<usize>| bytes.get(range).is_some_and(|b| b.iter().all(u8::is_ascii_digit));
    let fixed = bytes.len() >= 20
        && digits(0..4)
        && bytes[4] == b'-'
        && digits(5..7)
        && bytes[7] == b'-'
        && digits(8..10)
        && bytes[10] == b'T'
        && digits(11..13)
        && bytes[13] == b':'
        && digits(14..16)
        && bytes[16] == b':'
        && digits(17..19);
    let rest = &text[19.min(text.len())..];
    let fraction_ok = match rest.strip_prefix('.') {
        Some(fraction) => {
            let fraction = fraction.strip_suffix('Z').unwrap_or("x");
            (1..=9).contains(&fraction.len()) && fraction.bytes().all(|b| b.is_ascii_digit())
        }
        None => rest == "Z",
    };
    fixed && fraction_ok
}

/// KEDA v2.21.0's queue length without `demands` or `parent` (`stripDeadJobs`): Go decodes an
/// absent or `null` `result` to a nil pointer (counts) and a set one to non-nil (never counts); an
/// absent `receiveTime` to the zero time (counts), a set one to a non-zero time (counts only with
/// `scaleOnInFlight`).
fn keda_queue_length(list: &Value, scale_on_in_flight: bool) -> usize {
    let jobs = list["value"].as_array().expect("a value array");
    jobs.iter()
        .filter(|job| job.get("result").is_none_or(Value::is_null))
        .filter(|job| {
            let received = job.get("receiveTime").and_then(Value::as_str).is_some_and(|t| !t.starts_with("0001-01-01"));
            scale_on_in_flight || !received
        })
        .count()
}

fn ids(list: &Value) -> Vec<i64> {
    list["value"].as_array().unwrap().iter().map(|r| r["requestId"].as_i64().unwrap()).collect()
}

/// The error body of the service: `$id`, `innerException`, `message`, `typeName`, `typeKey`,
/// `errorCode`, `eventId`; returns `(typeKey, message)`.
fn service_error(reply: &Reply) -> (String, String) {
    let body = reply.json();
    assert_eq!(body["$id"], "1", "{body}");
    assert!(body["innerException"].is_null(), "{body}");
    assert_eq!(body["errorCode"], 0);
    assert_eq!(body["eventId"], 3000);
    let key = body["typeKey"].as_str().unwrap().to_owned();
    assert!(body["typeName"].as_str().unwrap().contains(&format!(".{key}, ")), "{body}");
    (key, body["message"].as_str().unwrap().to_owned())
}

// === TLS and lifecycle ===

#[tokio::test]
async fn fake_azure_devops_is_trusted_through_its_ca_file_and_refused_without_it() {
    let (fake, http, _) = setup();
    let pem = std::fs::read_to_string(fake.ca_pem_path()).unwrap();
    assert!(pem.starts_with("-----BEGIN CERTIFICATE-----"), "{pem}");
    assert_eq!(pem, fake.ca_pem());
    assert!(fake.base_url().starts_with("https://127.0.0.1:"));
    assert_eq!(fake.org_url(), format!("{}/{DEFAULT_ORG}", fake.base_url()));
    // The certificate names IP 127.0.0.1: the verifier accepts it for https://127.0.0.1:PORT.
    let pools = get(&http, &format!("{}/_apis/distributedtask/pools", fake.org_url()), PAT).await;
    assert_eq!(pools.status, 200);
    let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    let system_roots_only = reqwest::Client::builder().build().unwrap();
    let refused = system_roots_only.get(fake.org_url()).send().await;
    let error = format!("{:?}", refused.expect_err("a client without the CA refuses the certificate"));
    assert!(error.contains("UnknownIssuer"), "refused for its issuer, not for its names: {error}");
}

#[tokio::test]
async fn fake_azure_devops_stops_when_dropped() {
    let (fake, http, _) = setup();
    let url = format!("{}/_apis/distributedtask/pools", fake.org_url());
    assert_eq!(get(&http, &url, PAT).await.status, 200);
    let port = fake.port();
    drop(fake);
    let refused = std::net::TcpStream::connect(crate::common::process::loopback(port));
    assert!(refused.is_err(), "nothing listens on {port} any more");
}

// === pools (§4.2, §4.3) ===

#[tokio::test]
async fn fake_azure_devops_finds_a_pool_by_name_exactly_and_case_insensitively() {
    let (fake, http, pool) = setup();
    let spaced = fake.create_pool(DEFAULT_ORG, "my pool");
    fake.create_pool(DEFAULT_ORG, "tenant-ab");
    let base = format!("{}/_apis/distributedtask/pools", fake.org_url());
    let found = get(&http, &format!("{base}?poolName=TENANT-A"), PAT).await;
    assert_eq!(found.status, 200);
    let body = found.json();
    assert_eq!(body["count"], 1, "{body}");
    assert_eq!(body["value"][0]["id"], pool, "KEDA reads value[0].id");
    assert_eq!(body["value"][0]["name"], "tenant-a", "the server's spelling");
    for field in ["poolType", "isHosted", "size", "createdOn", "scope", "options"] {
        assert!(body["value"][0].get(field).is_some(), "{field} in {body}");
    }
    // KEDA escapes with url.QueryEscape: a space as '+'.
    let spaced_found = get(&http, &format!("{base}?poolName=my+pool"), PAT).await.json();
    assert_eq!(spaced_found["value"][0]["id"], spaced);
    let prefix = get(&http, &format!("{base}?poolName=tenant"), PAT).await.json();
    assert_eq!(prefix, json!({"count": 0, "value": []}), "no prefix match");
    fake.set_pool_name_wildcards(true);
    let wildcard = get(&http, &format!("{base}?poolName=tenant-*"), PAT).await.json();
    assert_eq!(wildcard["count"], 2, "with the switch, '*' matches");
}

#[tokio::test]
async fn fake_azure_devops_ignores_the_pool_id_query_and_answers_the_whole_list() {
    let (fake, http, pool) = setup();
    fake.create_pool(DEFAULT_ORG, "tenant-b");
    let reply = get(&http, &format!("{}/_apis/distributedtask/pools?poolID={pool}", fake.org_url()), PAT).await;
    assert_eq!(reply.status, 200);
    let body = reply.json();
    assert_eq!(body["count"], 2, "unknown parameters are ignored: {body}");
    assert!(body.get("id").is_none(), "KEDA's {{id}} decodes to 0 from a list");
}

#[tokio::test]
async fn fake_azure_devops_answers_404_for_an_unknown_pool_and_hides_pools_without_view() {
    let (fake, http, pool) = setup();
    let org = fake.org_url();
    let unknown = get(&http, &format!("{org}/_apis/distributedtask/pools/9999"), PAT).await;
    assert_eq!(unknown.status, 404);
    assert_eq!(service_error(&unknown).0, "TaskAgentPoolNotFoundException");
    let jobs = get(&http, &format!("{org}/_apis/distributedtask/pools/9999/jobrequests"), PAT).await;
    assert_eq!(jobs.status, 404);

    fake.register_agent(pool, "agent-1", &[], true);
    fake.set_pool_access(pool, READ_PAT, PoolAccess::None);
    let listed = get(&http, &format!("{org}/_apis/distributedtask/pools?poolName=tenant-a"), READ_PAT).await;
    assert_eq!(listed.json(), json!({"count": 0, "value": []}), "a hidden pool is not listed");
    let one = get(&http, &format!("{org}/_apis/distributedtask/pools/{pool}"), READ_PAT).await;
    assert_eq!(one.status, 404);
    let agents = get(&http, &format!("{org}/_apis/distributedtask/pools/{pool}/agents"), READ_PAT).await;
    assert_eq!((agents.status, agents.json()), (200, json!({"count": 0, "value": []})), "agents: empty 200");
    let owner = get(&http, &format!("{org}/_apis/distributedtask/pools/{pool}"), PAT).await;
    assert_eq!(owner.json()["size"], 1, "another identity still sees it");
}

// === authentication (§3.2, §8.2) ===

#[tokio::test]
async fn fake_azure_devops_answers_401_with_challenge_headers_to_unknown_credentials_with_suppress() {
    let (fake, http, _) = setup();
    let url = format!("{}/_apis/distributedtask/pools", fake.org_url());
    for pat in [None, Some("no-such-pat")] {
        let reply = send(&http, Method::GET, &url, pat, true, None).await;
        assert_eq!(reply.status, 401, "{pat:?}");
        assert_eq!(reply.all("www-authenticate"), [format!("Basic realm=\"{}/\"", fake.base_url())]);
        assert!(!reply.header("x-tfs-fedauthrealm").is_empty());
        assert_eq!(reply.header("x-vss-resourcetenant"), "00000000-0000-0000-0000-000000000000");
        assert!(!reply.header("activityid").is_empty());
        let (key, message) = service_error(&reply);
        assert_eq!(key, "UnauthorizedRequestException");
        assert!(message.starts_with("TF400813"), "{message}");
    }
    let tenant = "72f988bf-86f1-41af-91ab-2d7cd011db47";
    let entra = fake.create_entra_org("entra-org", tenant);
    let reply = send(&http, Method::GET, &format!("{entra}/_apis/connectionData"), None, true, None).await;
    assert_eq!(reply.status, 401);
    let challenges = reply.all("www-authenticate");
    assert!(challenges.contains(&format!("Bearer authorization_uri=https://login.microsoftonline.com/{tenant}")));
    assert_eq!(reply.header("x-vss-resourcetenant"), tenant);
}

#[tokio::test]
async fn fake_azure_devops_redirects_or_answers_203_without_suppress_per_the_org_style() {
    let (fake, http, _) = setup();
    let url = format!("{}/_apis/distributedtask/pools?poolName=tenant-a", fake.org_url());
    let redirected = get(&http, &url, "no-such-pat").await;
    assert_eq!(redirected.status, 302);
    let location = redirected.header("location");
    assert!(location.starts_with(&format!("{}/_signin?realm=dev.azure.com&", fake.base_url())), "{location}");
    assert!(!redirected.header("x-tfs-fedauthrealm").is_empty());
    assert!(redirected.header("content-type").starts_with("text/html"));
    assert!(redirected.text.contains("Object moved"));
    // A client following redirects, as Go's default one: a 200 HTML page, not JSON.
    let following = client(&fake, reqwest::redirect::Policy::limited(5));
    let landed = get(&following, &url, "no-such-pat").await;
    assert_eq!(landed.status, 200);
    assert!(landed.header("content-type").starts_with("text/html"));
    assert!(serde_json::from_str::<Value>(&landed.text).is_err(), "KEDA fails on JSON parsing");

    fake.set_unauthenticated_style(DEFAULT_ORG, Unauthenticated::SignIn203);
    let page = get(&http, &url, "no-such-pat").await;
    assert_eq!(page.status, 203);
    assert!(page.header("content-type").starts_with("text/html"));
    fake.set_unauthenticated_style(DEFAULT_ORG, Unauthenticated::Status401);
    assert_eq!(get(&http, &url, "no-such-pat").await.status, 401);
}

#[tokio::test]
async fn fake_azure_devops_answers_an_expired_pat_with_401_and_the_service_error_header() {
    let (fake, http, _) = setup();
    fake.expire_pat(PAT);
    let url = format!("{}/_apis/distributedtask/pools", fake.org_url());
    for suppress in [true, false] {
        let reply = send(&http, Method::GET, &url, Some(PAT), suppress, None).await;
        assert_eq!(reply.status, 401, "suppress={suppress}");
        assert_eq!(
            reply.header("x-tfs-serviceerror"),
            "Access%20Denied%3A%20The%20Personal%20Access%20Token%20used%20has%20expired."
        );
        let (key, message) = service_error(&reply);
        assert_eq!(key, "AccessCheckException");
        assert_eq!(message, "Access Denied: The Personal Access Token used has expired.");
        assert!(reply.json()["customProperties"].is_object());
    }
}

#[tokio::test]
async fn fake_azure_devops_answers_a_revoked_pat_with_401_like_an_unknown_one() {
    let (fake, http, _) = setup();
    fake.revoke_pat(PAT);
    let reply = get(&http, &format!("{}/_apis/distributedtask/pools", fake.org_url()), PAT).await;
    assert_eq!(reply.status, 401, "401 even without Suppress");
    let (key, message) = service_error(&reply);
    assert_eq!(key, "UnauthorizedRequestException");
    assert!(message.starts_with("TF400813: Resource not available for anonymous access"), "{message}");
}

#[tokio::test]
async fn fake_azure_devops_ignores_the_basic_user_and_refuses_a_pat_of_another_org() {
    let (fake, http, _) = setup();
    let url = format!("{}/_apis/distributedtask/pools", fake.org_url());
    let with_user = http.get(&url).basic_auth("anyone", Some(PAT)).send().await.unwrap();
    assert_eq!(with_user.status(), 200, "the user part is ignored");
    fake.create_org("other-org");
    fake.add_pat("other-org", "stranger", "other-org-pat", &[Scope::Full]);
    let foreign = send(&http, Method::GET, &url, Some("other-org-pat"), true, None).await;
    assert_eq!(foreign.status, 401);
}

#[tokio::test]
async fn fake_azure_devops_lets_a_read_pat_list_but_not_delete_and_a_viewer_gets_403() {
    let (fake, http, pool) = setup();
    let agent = fake.register_agent(pool, "agent-1", &[], true);
    let org = fake.org_url();
    let agents = format!("{org}/_apis/distributedtask/pools/{pool}/agents");
    assert_eq!(get(&http, &agents, READ_PAT).await.status, 200);
    let refused = send(&http, Method::DELETE, &format!("{agents}/{agent}"), Some(READ_PAT), true, None).await;
    assert_eq!(refused.status, 401, "a missing scope is 401, not 403");
    let identity = fake.identity_of(READ_PAT);
    assert_eq!(
        service_error(&refused).1,
        format!("TF400813: The user '{identity}' is not authorized to access this resource.")
    );
    fake.set_pool_access(pool, PAT, PoolAccess::View);
    let viewer = send(&http, Method::DELETE, &format!("{agents}/{agent}"), Some(PAT), true, None).await;
    assert_eq!(viewer.status, 403);
    assert_eq!(service_error(&viewer).0, "AccessDeniedException");
    fake.set_pool_access(pool, PAT, PoolAccess::Manage);
    let deleted = send(&http, Method::DELETE, &format!("{agents}/{agent}"), Some(PAT), true, None).await;
    assert_eq!(deleted.status, 204);
}

// === api-version (§2.1) ===

#[tokio::test]
async fn fake_azure_devops_checks_api_versions_per_resource_and_echoes_the_served_one() {
    let (fake, http, pool) = setup();
    let org = fake.org_url();
    let pools = format!("{org}/_apis/distributedtask/pools");
    let ok = get(&http, &format!("{pools}?api-version=7.1"), PAT).await;
    assert_eq!(ok.status, 200);
    assert_eq!(ok.header("content-type"), "application/json; charset=utf-8; api-version=7.1");
    for good in ["7.0", "7.1-preview.1", "7.2-preview.1"] {
        assert_eq!(get(&http, &format!("{pools}?api-version={good}"), PAT).await.status, 200, "{good}");
    }
    let preview = get(&http, &format!("{pools}?api-version=7.2"), PAT).await;
    assert_eq!(preview.status, 400);
    let (key, message) = service_error(&preview);
    assert_eq!(key, "VssInvalidPreviewVersionException");
    assert_eq!(
        message,
        "The requested version \"7.2\" of the resource is under preview. The -preview flag must be supplied in the api-version for such requests. For example: \"7.2-preview\""
    );
    let above = get(&http, &format!("{pools}?api-version=8.0"), PAT).await;
    assert_eq!(service_error(&above).0, "VssVersionOutOfRangeException");
    assert!(service_error(&above).1.ends_with("The latest REST API version this server supports is 7.2."));
    let malformed = get(&http, &format!("{pools}?api-version=seven"), PAT).await;
    assert_eq!(malformed.status, 400);
    let in_accept = http
        .get(&pools)
        .basic_auth("", Some(PAT))
        .header("Accept", "application/json;api-version=7.2")
        .send()
        .await
        .unwrap();
    assert_eq!(in_accept.status(), 400, "the Accept header's version counts too");

    let connection = format!("{org}/_apis/connectionData");
    let released = get(&http, &format!("{connection}?api-version=7.1"), PAT).await;
    assert_eq!(service_error(&released).0, "VssInvalidPreviewVersionException");
    assert_eq!(get(&http, &format!("{connection}?api-version=7.1-preview.1"), PAT).await.status, 200);
    let jobs = format!("{org}/_apis/distributedtask/pools/{pool}/jobrequests");
    assert_eq!(get(&http, &jobs, PAT).await.status, 200, "KEDA sends no api-version");
    assert_eq!(get(&http, &format!("{jobs}?api-version=7.1"), PAT).await.status, 200);
}

// === job requests (§4.9) as KEDA reads them ===

#[tokio::test]
async fn fake_azure_devops_shows_queued_received_and_finished_requests_as_keda_decodes_them() {
    let (fake, http, pool) = setup();
    let agent = fake.register_agent(pool, "tenant-a-agents-7d9f8c6b5-x2k4q", &[("kubectl", "/usr/bin/kubectl")], true);
    fake.agent_online(agent);
    fake.set_next_request_id((1 << 31) + 7);
    let demands = ["kubectl", "Agent.Version -gtVersion 2.182.1"];
    let queued = fake.queue_request(pool, &demands);
    let received = fake.queue_request(pool, &demands);
    let finished = fake.queue_request(pool, &demands);
    assert_eq!(queued, (1 << 31) + 7, "ids above 2^31");
    fake.receive(received, agent);
    let other = fake.register_agent(pool, "tenant-a-agents-7d9f8c6b5-q8wzt", &[("kubectl", "1")], true);
    fake.receive(finished, other);
    fake.finish(finished, JobResult::Succeeded);

    let reply = get(&http, &format!("{}/_apis/distributedtask/pools/{pool}/jobrequests", fake.org_url()), PAT).await;
    assert_eq!(reply.status, 200);
    let body = reply.json();
    assert_eq!(body["count"], 3);
    assert_eq!(ids(&body), [queued, received, finished]);
    let by_id = |id: i64| body["value"].as_array().unwrap().iter().find(|r| r["requestId"] == id).unwrap().clone();

    let q = by_id(queued);
    for absent in ["assignTime", "receiveTime", "lockedUntil", "finishTime", "result", "reservedAgent"] {
        assert!(q.get(absent).is_none(), "a queued request has no {absent} (omitted, not null): {q}");
    }
    assert!(is_rfc3339_utc(q["queueTime"].as_str().unwrap()), "{q}");
    assert_eq!(q["demands"], json!(demands), "demands are strings");
    assert_eq!(q["poolId"], pool);
    assert_eq!(q["planType"], "Build");
    assert_eq!(q["data"], json!({"ParallelismTag": "Private", "IsScheduledKey": "False"}));
    for field in ["serviceOwner", "hostId", "scopeId", "planId", "jobId", "orchestrationId"] {
        assert!(q[field].is_string(), "{field}: {q}");
    }
    assert!(q["definition"]["id"].is_i64() && q["owner"]["name"].is_string(), "{q}");
    assert!(q["priority"].is_i64());

    let r = by_id(received);
    assert!(r.get("result").is_none(), "{r}");
    for set in ["assignTime", "receiveTime", "lockedUntil"] {
        assert!(is_rfc3339_utc(r[set].as_str().unwrap()), "{set}: {r}");
    }
    assert_eq!(r["reservedAgent"]["id"], agent);
    assert_eq!(r["reservedAgent"]["name"], "tenant-a-agents-7d9f8c6b5-x2k4q");
    assert_eq!(r["reservedAgent"]["status"], "online");
    assert!(r["reservedAgent"]["_links"]["self"]["href"].is_string());

    let f = by_id(finished);
    assert_eq!(f["result"], "succeeded");
    assert!(is_rfc3339_utc(f["finishTime"].as_str().unwrap()));

    assert_eq!(keda_queue_length(&body, true), 2, "scaleOnInFlight=true (default): queued and received");
    assert_eq!(keda_queue_length(&body, false), 1, "scaleOnInFlight=false: only the queued one");
    let stored = fake.job_request(received);
    assert_eq!(stored.agent_id, Some(agent));
    assert_eq!(r["receiveTime"].as_str(), stored.receive_time.as_deref());
}

#[tokio::test]
async fn fake_azure_devops_varies_the_fractional_digits_of_its_timestamps() {
    let (fake, http, pool) = setup();
    for _ in 0..8 {
        fake.queue_request(pool, &[]);
    }
    let body =
        get(&http, &format!("{}/_apis/distributedtask/pools/{pool}/jobrequests", fake.org_url()), PAT).await.json();
    let lengths: std::collections::BTreeSet<usize> = body["value"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["queueTime"].as_str().unwrap())
        .inspect(|t| assert!(is_rfc3339_utc(t), "{t}"))
        .map(|t| t.split_once('.').map_or(0, |(_, f)| f.len() - 1))
        .collect();
    assert!(lengths.len() >= 4 && lengths.contains(&0), "fractional digit counts seen: {lengths:?}");
}

#[tokio::test]
async fn fake_azure_devops_top_returns_the_newest_requests_without_matched_agents_and_pages() {
    let (fake, http, pool) = setup();
    fake.register_agent(pool, "parent", &[], false);
    let first = fake.queue_request(pool, &[]);
    for _ in 0..TOP_CAP + 4 {
        fake.queue_request(pool, &[]);
    }
    let jobs = format!("{}/_apis/distributedtask/pools/{pool}/jobrequests", fake.org_url());
    // KEDA writes `$top` unescaped; a client that escapes it sends %24top.
    let page = get(&http, &format!("{jobs}?$top=2"), PAT).await;
    let body = page.json();
    let newest = first + TOP_CAP as i64 + 4;
    assert_eq!(ids(&body), [newest, newest - 1]);
    assert!(body["value"][0].get("matchedAgents").is_none(), "$top drops matchedAgents: {}", body["value"][0]);
    assert_eq!(page.header("x-ms-continuationtoken"), (newest - 1).to_string());
    let next = get(&http, &format!("{jobs}?%24top=2&continuationToken={}", newest - 1), PAT).await.json();
    assert_eq!(ids(&next), [newest - 2, newest - 3]);
    let capped = get(&http, &format!("{jobs}?$top=250"), PAT).await;
    assert_eq!(capped.json()["count"], TOP_CAP, "at most 200");
    assert!(capped.headers.contains_key("x-ms-continuationtoken"));
    fake.set_top_includes_matched_agents(true);
    let with = get(&http, &format!("{jobs}?$top=1"), PAT).await.json();
    assert_eq!(with["value"][0]["matchedAgents"][0]["name"], "parent");
    let combined = get(&http, &format!("{jobs}?$top=1&completedRequestCount=0"), PAT).await;
    assert_eq!(combined.status, 400, "$top and completedRequestCount do not combine");
}

#[tokio::test]
async fn fake_azure_devops_completed_request_count_zero_returns_unfinished_requests_with_matched_agents() {
    let (fake, http, pool) = setup();
    let parent = fake.register_agent(pool, "placeholder", &[("kubectl", "1"), ("Agent.OS", "Linux")], false);
    fake.register_agent(pool, "no-kubectl", &[("Agent.OS", "Linux")], false);
    let old = fake.register_agent(pool, "old-agent", &[("kubectl", "1"), ("Agent.Version", "2.100.0")], false);
    let disabled = fake.register_agent(pool, "disabled", &[("kubectl", "1"), ("Agent.OS", "Linux")], false);
    fake.set_agent_enabled(disabled, false);
    let demands = ["kubectl", "Agent.Version -gtVersion 2.182.1", "Agent.OS -equals linux"];
    let queued = fake.queue_request(pool, &demands);
    let running = fake.queue_request(pool, &demands);
    let done = fake.queue_request(pool, &demands);
    fake.receive(running, parent);
    fake.receive(done, parent);
    fake.finish(done, JobResult::Failed);
    let jobs = format!("{}/_apis/distributedtask/pools/{pool}/jobrequests", fake.org_url());
    let body = get(&http, &format!("{jobs}?completedRequestCount=0"), PAT).await.json();
    assert_eq!(ids(&body), [queued, running], "finished requests left out");
    let matched: Vec<&str> =
        body["value"][0]["matchedAgents"].as_array().unwrap().iter().map(|a| a["name"].as_str().unwrap()).collect();
    assert_eq!(matched, ["placeholder", "disabled"], "agents meeting every demand, offline and disabled ones too");
    let _ = old;
    fake.set_matched_agents_include_disabled(false);
    let enabled_only = get(&http, &format!("{jobs}?completedRequestCount=0"), PAT).await.json();
    assert_eq!(enabled_only["value"][0]["matchedAgents"].as_array().unwrap().len(), 1, "switch: enabled agents only");
    let all = get(&http, &jobs, PAT).await.json();
    assert_eq!(all["count"], 3, "no query: finished ones too");
    assert!(all["value"][2]["matchedAgents"].is_array(), "the no-query form carries matchedAgents");
    let agent_view = get(&http, &format!("{jobs}?agentId={parent}&completedRequestCount=1"), PAT).await.json();
    assert_eq!(ids(&agent_view), [running, done]);
}

#[tokio::test]
async fn fake_azure_devops_abandons_the_request_of_a_killed_agent_when_its_lock_lapses() {
    let (fake, http, pool) = setup();
    let agent = fake.register_agent(pool, "dies-mid-job", &[], true);
    fake.agent_online(agent);
    let request = fake.queue_request(pool, &[]);
    fake.receive(request, agent);
    fake.kill_agent(agent);
    let url =
        format!("{}/_apis/distributedtask/pools/{pool}/agents/{agent}?includeAssignedRequest=true", fake.org_url());
    let dead = get(&http, &url, PAT).await.json();
    assert_eq!(dead["status"], "offline");
    assert_eq!(dead["assignedRequest"]["requestId"], request, "still assigned while the lock holds");
    fake.advance_clock(Duration::from_secs(9 * 60));
    assert_eq!(fake.job_request(request).result, None);
    fake.advance_clock(Duration::from_secs(2 * 60));
    let view = fake.job_request(request);
    assert_eq!(view.result, Some(JobResult::Abandoned));
    assert_eq!(view.finish_time, view.locked_until, "finished when the lock lapsed");
    let after = get(&http, &url, PAT).await.json();
    assert!(after.get("assignedRequest").is_none(), "{after}");
}

// === agents (§4.4–§4.8) ===

#[tokio::test]
async fn fake_azure_devops_lists_gets_updates_adds_and_deletes_agents() {
    let (fake, http, pool) = setup();
    let org = fake.org_url();
    let agents = format!("{org}/_apis/distributedtask/pools/{pool}/agents");
    let busy = fake.register_agent(pool, "busy", &[("CDTARGET_UID", "u-1")], true);
    let idle = fake.register_agent(pool, "idle", &[], false);
    let request = fake.queue_request(pool, &[]);
    fake.receive(request, busy);

    let plain = get(&http, &agents, PAT).await.json();
    assert_eq!(plain["count"], 2);
    let first = &plain["value"][0];
    for absent in ["systemCapabilities", "assignedRequest", "lastCompletedRequest"] {
        assert!(first.get(absent).is_none(), "{absent} needs its include switch: {first}");
    }
    assert!(
        first["authorization"]["clientId"].is_string() && first["authorization"]["publicKey"]["exponent"] == "AQAB"
    );
    assert!(plain["value"][1].get("authorization").is_none(), "no key, no authorization");
    let full =
        get(&http, &format!("{agents}?agentName=BUSY&includeCapabilities=true&includeAssignedRequest=true"), PAT)
            .await
            .json();
    assert_eq!(full["count"], 1);
    assert_eq!(full["value"][0]["systemCapabilities"]["CDTARGET_UID"], "u-1");
    assert_eq!(full["value"][0]["assignedRequest"]["requestId"], request);

    let refused = send(&http, Method::DELETE, &format!("{agents}/{busy}"), Some(PAT), true, None).await;
    assert_eq!(refused.status, 400);
    assert_eq!(
        service_error(&refused),
        (
            "TaskAgentJobStillRunningException".to_owned(),
            "Agent \"busy\" is running a job for pool \"tenant-a\"".to_owned()
        )
    );
    fake.finish(request, JobResult::Succeeded);
    let last = get(&http, &format!("{agents}/{busy}?includeLastCompletedRequest=true"), PAT).await.json();
    assert_eq!(last["lastCompletedRequest"]["requestId"], request);
    assert_eq!(send(&http, Method::DELETE, &format!("{agents}/{busy}"), Some(PAT), true, None).await.status, 204);
    assert_eq!(get(&http, &format!("{org}/_apis/distributedtask/pools/{pool}"), PAT).await.json()["size"], 1);
    let job = get(&http, &format!("{org}/_apis/distributedtask/pools/{pool}/jobrequests/{request}"), PAT).await.json();
    assert_eq!(job["reservedAgent"]["name"], "busy", "the request keeps its reservedAgent");
    let gone = get(&http, &format!("{agents}/{busy}"), PAT).await;
    assert_eq!((gone.status, service_error(&gone).0.as_str()), (404, "TaskAgentNotFoundException"));
    let again = send(&http, Method::DELETE, &format!("{agents}/{busy}"), Some(PAT), true, None).await;
    assert_eq!(again.status, 404);
    fake.set_delete_unknown_agent_status(204);
    assert_eq!(send(&http, Method::DELETE, &format!("{agents}/{busy}"), Some(PAT), true, None).await.status, 204);

    let patched = send(
        &http,
        Method::PATCH,
        &format!("{agents}/{idle}"),
        Some(PAT),
        true,
        Some(json!({"id": idle, "enabled": false})),
    )
    .await;
    assert_eq!((patched.status, patched.json()["enabled"].clone()), (200, json!(false)));

    let placeholder = json!({"name": "tenant-a-placeholder", "version": "4.255.0", "osDescription": "Linux",
        "systemCapabilities": {"Agent.Version": "4.255.0", "kubectl": "true"}});
    let added = send(&http, Method::POST, &agents, Some(PAT), true, Some(placeholder.clone())).await;
    assert_eq!(added.status, 200);
    let added = added.json();
    assert_eq!((added["status"].as_str(), added["version"].as_str()), (Some("offline"), Some("4.255.0")));
    assert!(added["id"].as_i64().unwrap() > i64::from(busy), "ids are never reused");
    assert!(added.get("authorization").is_none(), "no key sent, no OAuth client");
    let duplicate = send(&http, Method::POST, &agents, Some(PAT), true, Some(placeholder)).await;
    assert_eq!((duplicate.status, service_error(&duplicate).0.as_str()), (409, "TaskAgentExistsException"));
    let versionless = send(&http, Method::POST, &agents, Some(PAT), true, Some(json!({"name": "x"}))).await;
    assert_eq!(
        (versionless.status, service_error(&versionless).0.as_str()),
        (400, "TaskAgentVersionNotSupportedException"),
        "no version: 1.0.0, below the minimum"
    );
    let keyed = json!({"name": "keyed", "version": "4.255.0",
        "authorization": {"publicKey": {"exponent": "AQAB", "modulus": "3Yj+"}}});
    let keyed = send(&http, Method::POST, &agents, Some(PAT), true, Some(keyed)).await.json();
    assert!(keyed["authorization"]["clientId"].is_string() && keyed["authorization"]["authorizationUrl"].is_string());
}

#[tokio::test]
async fn fake_azure_devops_connection_data_names_the_authenticated_identity() {
    let (fake, http, _) = setup();
    let reply =
        get(&http, &format!("{}/_apis/connectionData?api-version=7.1-preview.1", fake.org_url()), READ_PAT).await;
    assert_eq!(reply.status, 200);
    let body = reply.json();
    assert_eq!(body["authenticatedUser"]["id"], fake.identity_of(READ_PAT));
    assert_eq!(body["authenticatedUser"]["providerDisplayName"], "reader");
    assert_eq!(body["deploymentType"], "hosted");
    assert!(body["instanceId"].is_string() && body["authorizedUser"].is_object());
}

// === Entra tokens (§3.3, §4.10) ===

#[tokio::test]
async fn fake_azure_devops_issues_entra_tokens_that_an_entra_org_accepts_until_they_expire() {
    let fake = FakeAzureDevOps::start();
    let http = client(&fake, reqwest::redirect::Policy::none());
    let tenant = "3b7e5f3a-0c1d-4e2f-9a8b-7c6d5e4f3a2b";
    let org = fake.create_entra_org("entra-org", tenant);
    fake.create_pool("entra-org", "pool");
    let identity = fake.add_service_principal(tenant, "entra-org", "cdtarget-sp", "client-1", "s3cret");
    let token_url = format!("{}/{tenant}/oauth2/v2.0/token", fake.base_url());
    let form = |secret: &str| {
        format!(
            "grant_type=client_credentials&client_id=client-1&client_secret={secret}&scope=499b84ac-1321-427f-aa17-267ca6975798%2F.default"
        )
    };
    let post = |body: String| {
        http.post(&token_url).header("Content-Type", "application/x-www-form-urlencoded").body(body).send()
    };
    let wrong = post(form("nope")).await.unwrap();
    assert_eq!(wrong.status(), 401);
    let issued: Value = post(form("s3cret")).await.unwrap().json().await.unwrap();
    assert_eq!((issued["token_type"].as_str(), issued["expires_in"].as_i64()), (Some("Bearer"), Some(3599)));
    let token = issued["access_token"].as_str().unwrap().to_owned();
    let pools = format!("{org}/_apis/distributedtask/pools");
    let ok = http.get(&pools).bearer_auth(&token).send().await.unwrap();
    assert_eq!(ok.status(), 200);
    let msa = http.get(format!("{}/_apis/distributedtask/pools", fake.org_url())).bearer_auth(&token);
    let msa = msa.header("X-TFS-FedAuthRedirect", "Suppress").send().await.unwrap();
    assert_eq!(msa.status(), 401, "an org backed by Microsoft accounts takes no Entra token");
    fake.remove_from_org(&identity, "entra-org");
    let outsider: Value = http.get(&pools).bearer_auth(&token).send().await.unwrap().json().await.unwrap();
    assert!(outsider["message"].as_str().unwrap().starts_with("TF401444"), "{outsider}");
    fake.advance_clock(Duration::from_secs(3600));
    let expired = http.get(&pools).bearer_auth(&token).send().await.unwrap();
    assert_eq!(expired.status(), 401);
    assert!(fake.requests().iter().any(|r| r.credential == Credential::Bearer("cdtarget-sp".into())));
}

// === rate limits and faults (§5, §8.4) ===

#[tokio::test]
async fn fake_azure_devops_sends_rate_headers_from_80_percent_and_429_when_blocked() {
    let (fake, http, _) = setup();
    fake.set_rate_limit(5);
    let url = format!("{}/_apis/distributedtask/pools", fake.org_url());
    for _ in 0..3 {
        let quiet = get(&http, &url, PAT).await;
        assert!(!quiet.headers.contains_key("x-ratelimit-remaining"), "under 80 %");
    }
    let warned = get(&http, &url, PAT).await;
    assert_eq!(warned.status, 200);
    assert_eq!(warned.header("x-ratelimit-limit"), "5");
    assert_eq!(warned.header("x-ratelimit-remaining"), "1");
    assert_eq!(warned.header("x-ratelimit-resource"), "Core");
    assert!(warned.header("retry-after").parse::<u64>().unwrap() >= 1);
    assert!(warned.header("x-ratelimit-reset").parse::<u64>().is_ok());
    assert!(!warned.headers.contains_key("x-ratelimit-delay"));
    get(&http, &url, PAT).await;
    let delayed = get(&http, &url, PAT).await;
    assert_eq!((delayed.status, delayed.header("x-ratelimit-remaining")), (200, "0"));
    assert!(delayed.headers.contains_key("x-ratelimit-delay"), "over the limit: delayed");
    fake.set_rate_mode(PAT, RateMode::Blocked);
    let blocked = get(&http, &url, PAT).await;
    assert_eq!(blocked.status, 429);
    assert!(blocked.headers.contains_key("retry-after"));
    assert!(service_error(&blocked).1.starts_with("TF400733: The request has been canceled"));
    fake.advance_clock(Duration::from_secs(301));
    fake.set_rate_mode(PAT, RateMode::Normal);
    assert!(!get(&http, &url, PAT).await.headers.contains_key("x-ratelimit-limit"), "the window slid by");
}

#[tokio::test]
async fn fake_azure_devops_answers_injected_faults_instead_of_the_api() {
    let (fake, http, pool) = setup();
    let jobs = format!("{}/_apis/distributedtask/pools/{pool}/jobrequests", fake.org_url());
    let pools = format!("{}/_apis/distributedtask/pools", fake.org_url());
    fake.inject(Some("jobrequests.list"), Fault::Status(503), 2);
    assert_eq!(get(&http, &pools, PAT).await.status, 200, "another endpoint is untouched");
    assert_eq!(get(&http, &jobs, PAT).await.status, 503);
    assert_eq!(get(&http, &jobs, PAT).await.status, 503);
    assert_eq!(get(&http, &jobs, PAT).await.status, 200, "two times only");
    fake.inject(None, Fault::SignInPage, 1);
    let page = get(&http, &jobs, PAT).await;
    assert_eq!((page.status, page.header("content-type").starts_with("text/html")), (203, true));
    fake.inject(None, Fault::Reset, 1);
    let reset = async { http.get(&jobs).basic_auth("", Some(PAT)).send().await?.text().await };
    assert!(reset.await.is_err(), "the connection is aborted");
    fake.inject(None, Fault::Stall, 1);
    let stalled = http.get(&jobs).basic_auth("", Some(PAT)).timeout(Duration::from_millis(300)).send().await;
    assert!(stalled.is_err_and(|e| e.is_timeout()), "no answer: the client times out");
    assert_eq!(fake.counts().endpoint("jobrequests.list"), 6);
}

// === test controls: log and counters (§8.5) ===

#[tokio::test]
async fn fake_azure_devops_logs_which_credential_was_used_never_the_token() {
    let (fake, http, pool) = setup();
    let url = format!("{}/_apis/distributedtask/pools?poolName=tenant-a", fake.org_url());
    get(&http, &url, PAT).await;
    send(&http, Method::GET, &url, Some("garbage-token"), true, None).await;
    send(&http, Method::GET, &url, None, false, None).await;
    get(&http, &format!("{}/_apis/distributedtask/pools/{pool}/jobrequests?$top=5", fake.org_url()), READ_PAT).await;
    let log = fake.requests();
    let credentials: Vec<&Credential> = log.iter().map(|r| &r.credential).collect();
    assert_eq!(
        credentials,
        [
            &Credential::Pat("ci-bot".into()),
            &Credential::Unknown("basic"),
            &Credential::None,
            &Credential::Pat("reader".into())
        ]
    );
    assert_eq!(log[0].method, "GET");
    assert_eq!(log[0].path, format!("/{DEFAULT_ORG}/_apis/distributedtask/pools?poolName=tenant-a"));
    assert_eq!(log[0].endpoint, "pools.list");
    assert_eq!((log[0].status, log[1].status, log[2].status), (Some(200), Some(401), Some(302)));
    assert!(log[1].suppress_redirect && !log[0].suppress_redirect);
    assert_eq!(log[3].path, format!("/{DEFAULT_ORG}/_apis/distributedtask/pools/{pool}/jobrequests?$top=5"));
    let everything = format!("{log:?}{}", fake.state_document());
    for secret in [PAT, READ_PAT, "garbage-token"] {
        assert!(!everything.contains(secret), "{secret} leaked into the log or state");
    }
    let counts = fake.counts();
    assert_eq!((counts.endpoint("pools.list"), counts.endpoint("jobrequests.list")), (3, 1));
    assert_eq!((counts.status(200), counts.status(401), counts.status(302), counts.total()), (2, 1, 1, 4));
    fake.reset_log();
    assert!(fake.requests().is_empty() && fake.counts().total() == 0);
}

#[tokio::test]
async fn fake_azure_devops_puts_activity_session_and_e2e_ids_on_every_response() {
    let (fake, http, _) = setup();
    let url = format!("{}/_apis/distributedtask/pools", fake.org_url());
    let mine = "7f1c2d3e-4b5a-4c6d-8e9f-0a1b2c3d4e5f";
    let echoed = http.get(&url).basic_auth("", Some(PAT)).header("X-TFS-Session", mine).send().await.unwrap();
    assert_eq!(echoed.headers()["x-tfs-session"], mine);
    for reply in [get(&http, &url, PAT).await, send(&http, Method::GET, &url, None, true, None).await] {
        for name in ["activityid", "x-tfs-session", "x-vss-e2eid"] {
            assert_eq!(reply.header(name).len(), 36, "{name} is a UUID");
        }
    }
}
