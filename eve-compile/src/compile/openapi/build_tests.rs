//! OpenAPI connections at build time: documents of both versions, names, effects, filters and
//! overrides, and the diagnostics of documents and connection files that are wrong.

use eve_discover::{Code, Diagnostic};
use serde_json::json;

use crate::manifest::*;

/// Compiles an agent folder made of `files`; the tools and the diagnostics.
fn build(files: &[(&str, &str)]) -> (Vec<Tool>, Vec<Diagnostic>) {
    let dir = tempfile::tempdir().unwrap();
    let agent = dir.path().join("agent");
    std::fs::create_dir_all(&agent).unwrap();
    std::fs::write(agent.join("instructions.md"), "Test.\n").unwrap();
    for (path, text) in files {
        let path = agent.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    let source = eve_discover::FsSource::new(&agent).unwrap();
    let out = crate::compile(
        &eve_discover::discover(&source),
        &crate::Options {
            name: "t".into(),
            file_prefix: String::new(),
            protected_dirs: Vec::new(),
            agent_dir: Some(agent),
            cache_dir: None,
            fetch: None,
        },
    );
    (out.manifest.agent.tools, out.diagnostics)
}

const PETS_30: &str = r##"openapi: 3.0.3
info: {title: pets, version: "1"}
servers: [{url: "https://pets.example.com/v1"}]
paths:
  /pets/{petId}:
    parameters:
      - $ref: "#/components/parameters/PetId"
    get:
      operationId: getPet
      summary: Read one pet
      responses: {"200": {description: ok}}
    delete:
      responses: {"204": {description: gone}}
  /pets:
    get:
      operationId: listPets
      parameters:
        - {name: tags, in: query, schema: {type: array, items: {type: string}}, explode: false}
        - {name: X-Trace, in: header, schema: {type: string}}
      responses: {"200": {description: ok}}
    post:
      operationId: "create pet!"
      requestBody:
        required: true
        content:
          application/json:
            schema: {$ref: "#/components/schemas/Pet"}
      responses: {"201": {description: made}}
components:
  parameters:
    PetId: {name: petId, in: path, required: true, schema: {type: string}}
  schemas:
    Pet:
      type: object
      required: [name]
      properties:
        name: {type: string}
        parent: {$ref: "#/components/schemas/Pet"}
"##;

#[test]
fn a_3_0_yaml_document_becomes_one_tool_per_operation() {
    let (tools, diags) = build(&[
        ("specs/pets.yaml", PETS_30),
        (
            "connections/pets.yaml",
            "openapi: specs/pets.yaml\nauth: {type: bearer, token: \"${PETS_TOKEN}\"}\noperations:\n  override:\n    listPets: {approval: always}\n    delete_pets_petId: {effect: write}\n",
        ),
    ]);
    assert!(diags.is_empty(), "{diags:#?}");
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "pets__create_pet",
            "pets__delete_pets_petId",
            "pets__getPet",
            "pets__listPets"
        ]
    );
    let get = &tools[2];
    assert_eq!(get.effect, Effect::Read);
    assert_eq!(get.input_schema["required"], json!(["petId"]));
    assert!(get.description.starts_with("Read one pet"));
    let Runner::OpenApi(call) = &get.runner else {
        panic!("{:?}", get.runner)
    };
    assert_eq!(call.base_url, "https://pets.example.com/v1");
    assert_eq!(call.path, "/pets/{petId}");
    assert_eq!(call.document, "specs/pets.yaml");
    assert_eq!(
        call.auth,
        Some(ConnectionAuth::Bearer {
            token: "${PETS_TOKEN}".into()
        })
    );
    // Effects from the method, unless the file says otherwise; approvals per operation.
    assert_eq!(tools[1].effect, Effect::Write);
    assert_eq!(tools[3].approval, Approval::Always);
    assert_eq!(tools[0].approval, Approval::Never);
    // The body under `body`, `$ref`s inlined, recursion cut.
    let body = &tools[0].input_schema["properties"]["body"];
    assert_eq!(body["required"], json!(["name"]));
    assert_eq!(body["properties"]["name"]["type"], "string");
    let parent = body["properties"]["parent"]["description"]
        .as_str()
        .unwrap_or_default();
    assert!(parent.contains("recursive"), "{body}");
    assert_eq!(tools[0].input_schema["required"], json!(["body"]));
    let Runner::OpenApi(list) = &tools[3].runner else {
        panic!()
    };
    assert_eq!(list.parameters[0].style, "form");
    assert!(!list.parameters[0].explode);
    assert_eq!(list.parameters[1].location, ParamLocation::Header);
}

#[test]
fn a_3_1_json_document_and_operation_filters() {
    let doc = json!({
        "openapi": "3.1.0",
        "info": {"title": "t", "version": "1"},
        "paths": {
            "/a": {"get": {"operationId": "read_a", "responses": {}}},
            "/b": {"put": {"operationId": "put_b", "responses": {},
                "requestBody": {"content": {"application/merge-patch+json": {"schema": {"type": ["object", "null"]}}}}}},
            "/c": {"post": {"operationId": "admin_c", "responses": {}}}
        }
    });
    let (tools, diags) = build(&[
        ("api.json", &doc.to_string()),
        (
            "connections/api.yaml",
            "openapi: api.json\nbase_url: http://127.0.0.1:9/\noperations: {allow: [\"*_*\"], block: [admin_*]}\n",
        ),
    ]);
    assert!(diags.is_empty(), "{diags:#?}");
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["api__put_b", "api__read_a"]);
    assert_eq!(tools[0].effect, Effect::Idempotent);
    let Runner::OpenApi(put) = &tools[0].runner else {
        panic!()
    };
    assert_eq!(put.base_url, "http://127.0.0.1:9");
    assert_eq!(
        put.body.as_ref().map(|b| b.content_type.as_str()),
        Some("application/merge-patch+json")
    );
}

#[test]
fn a_document_that_does_not_parse_is_reported_at_its_line() {
    let broken = "openapi: 3.0.3\ninfo: {title: t, version: \"1\"}\npaths:\n  /a:\n    get:\n      parameters:\n        - {name: x, in: nowhere}\n      responses: {}\n";
    let (_, diags) = build(&[
        ("specs/bad.yaml", broken),
        (
            "connections/bad.yaml",
            "openapi: specs/bad.yaml\nbase_url: https://x.example\n",
        ),
    ]);
    let d = diags
        .iter()
        .find(|d| d.code == Code::InvalidOpenApi)
        .unwrap_or_else(|| panic!("{diags:#?}"));
    assert_eq!(d.file.as_deref(), Some("specs/bad.yaml"));
    assert_eq!(d.line, Some(7), "{d:?}");
    assert!(d.message.contains("nowhere"), "{d:?}");

    let (_, diags) = build(&[
        (
            "specs/syntax.json",
            "{\"openapi\": \"3.1.0\",\n  \"paths\": {\n}}}\n",
        ),
        (
            "connections/s.yaml",
            "openapi: specs/syntax.json\nbase_url: https://x.example\n",
        ),
    ]);
    let d = diags
        .iter()
        .find(|d| d.code == Code::InvalidOpenApi)
        .unwrap_or_else(|| panic!("{diags:#?}"));
    assert_eq!(d.file.as_deref(), Some("specs/syntax.json"));
    assert!(d.line.is_some(), "{d:?}");

    let (_, diags) = build(&[
        ("old.json", "{\"swagger\": \"2.0\"}"),
        (
            "connections/old.yaml",
            "openapi: old.json\nbase_url: https://x.example\n",
        ),
    ]);
    assert!(
        diags
            .iter()
            .any(|d| d.code == Code::InvalidOpenApi && d.message.contains("Swagger 2.0")),
        "{diags:#?}"
    );
}

#[test]
fn connection_files_that_are_wrong_are_coded() {
    let doc = json!({"openapi": "3.1.0", "info": {"title": "t", "version": "1"},
        "paths": {"/a": {"get": {"operationId": "a", "responses": {}}}}})
    .to_string();
    let cases: &[(&str, &str)] = &[
        (
            "openapi: https://example.com/openapi.json\n",
            "cannot fetch the OpenAPI document",
        ),
        (
            "openapi: ../outside.json\nbase_url: https://x.example\n",
            "inside the agent folder",
        ),
        ("openapi: api.json\n", "no `servers`"),
        ("openapi: api.json\nbase_url: ftp://x\n", "not an absolute"),
        (
            "openapi: api.json\nbase_url: https://x.example\nauth: {type: bearer, token: hunter2hunter2}\n",
            "from the environment",
        ),
        (
            "openapi: api.json\nbase_url: https://x.example\nauth: {type: oauth}\n",
            "not supported",
        ),
        (
            "openapi: api.json\nbase_url: https://x.example\noperations: {override: {nope: {approval: always}}}\n",
            "not an operation",
        ),
        (
            "openapi: api.json\nurl: https://x.example/mcp\n",
            "both `openapi` and `url`",
        ),
        (
            "openapi: missing.json\nbase_url: https://x.example\n",
            "cannot read",
        ),
    ];
    for (file, expected) in cases {
        let (tools, diags) = build(&[("api.json", &doc), ("connections/api.yaml", file)]);
        assert!(tools.is_empty(), "{file}: {tools:?}");
        assert!(
            diags.iter().any(
                |d| matches!(d.code, Code::InvalidConnection | Code::InvalidOpenApi)
                    && d.message.contains(expected)
                    && d.line.is_some()
            ),
            "{file}: expected `{expected}` in {diags:#?}"
        );
    }
}

#[test]
fn two_operations_with_one_name_are_reported() {
    let doc = json!({"openapi": "3.1.0", "info": {"title": "t", "version": "1"},
        "paths": {"/a": {"get": {"operationId": "same", "responses": {}}},
                  "/b": {"get": {"operationId": "same", "responses": {}}}}})
    .to_string();
    let (_, diags) = build(&[
        ("api.json", &doc),
        (
            "connections/api.yaml",
            "openapi: api.json\nbase_url: https://x.example\n",
        ),
    ]);
    assert!(
        diags
            .iter()
            .any(|d| d.code == Code::InvalidOpenApi && d.message.contains("both become")),
        "{diags:#?}"
    );
}
