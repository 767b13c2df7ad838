//! The GluesyncPlatform reference, `docs/reference.md`, generated from the CRD: every spec field with its
//! type, default, allowed values, meaning and the Helm values that set it, then the status fields, the
//! validation rules, the printer columns, and the annotations, label and finalizer GKO uses.
//!
//! Everything about a field comes from the CRD's OpenAPI schema, so the page cannot say something the API
//! server does not enforce. The Helm value names follow a rule from the field path, with a few exceptions
//! listed here; the tests check every derived name against the charts' `values.yaml`.

use std::fmt::Write as _;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinitionVersion, JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use kube::CustomResourceExt;

use gluesync_operator::api;

/// Spec fields whose value in the gluesync-operator chart is not `platform.<field>`, by field path; the
/// fields below them follow (`spec.selfUpdate.enabled` is `selfUpdate.enabled`).
const OPERATOR_CHART_EXCEPTIONS: &[(&str, &str)] = &[("spec.selfUpdate", "selfUpdate")];

/// Spec fields whose value in the Gluesync kit is not `operator.platform.<field>` (the kit hands
/// `operator.*` to the gluesync-operator chart, and renders the GluesyncPlatform itself).
const KIT_EXCEPTIONS: &[(&str, &str)] = &[
    ("spec.version", "gluesyncCoreHub.tag"),
    ("spec.updatePolicy", "operator.updatePolicy"),
    ("spec.selfUpdate", "operator.selfUpdate"),
];

/// Spec fields the charts take as one block with no default (`platform.disasterRecovery: {}`,
/// `platform.maintenanceWindows: []`): the values below them are named by the rule but are not in
/// `values.yaml`.
#[cfg(test)]
const WHOLE_BLOCKS: &[&str] = &["spec.disasterRecovery", "spec.maintenanceWindows"];

/// The Helm value to look for in `values.yaml` for a field: the field's own, or its whole block's.
#[cfg(test)]
fn in_values(field: &str, name: &str) -> String {
    for block in WHOLE_BLOCKS {
        if let Some(rest) = field.strip_prefix(block)
            && (rest.starts_with('.') || rest.starts_with('['))
        {
            return name.strip_suffix(rest).unwrap_or(name).to_string();
        }
    }
    name.to_string()
}

/// What `helm upgrade` does with a field beyond writing its value, for both charts.
const HELM_NOTES: &[(&str, &str)] = &[
    (
        "spec.version",
        "under `updatePolicy: ui` the live value wins on `helm upgrade` (the Core Hub UI moves it ahead), \
         under `gitops` the Helm value wins",
    ),
    (
        "spec.modules",
        "under `updatePolicy: ui` the live value wins on `helm upgrade`, under `gitops` the Helm value wins",
    ),
    ("spec.requestID", "the live value is kept on `helm upgrade`"),
    (
        "spec.disasterRecovery",
        "under `updatePolicy: ui` the live value wins on `helm upgrade` (the Core Hub UI sets it up and \
         takes it down), under `gitops` the Helm value wins",
    ),
    (
        "spec.updatePolicy",
        "in the gluesync-operator chart the kit-style `updatePolicy` stands for it when set",
    ),
];

/// The Helm value of the gluesync-operator chart that sets a spec field (`spec.coreHub.url` →
/// `platform.coreHub.url`).
fn operator_chart_value(field: &str) -> String {
    helm_value(field, "platform.", OPERATOR_CHART_EXCEPTIONS)
}

/// The Helm value of the Gluesync kit that sets a spec field (`spec.coreHub.url` →
/// `operator.platform.coreHub.url`, `spec.version` → `gluesyncCoreHub.tag`).
fn kit_value(field: &str) -> Option<String> {
    // The kit pins no module (the product docs: to pin from Git, install GKO with its own chart).
    if field == "spec.modules" || field.starts_with("spec.modules.") {
        return None;
    }
    Some(helm_value(field, "operator.platform.", KIT_EXCEPTIONS))
}

fn helm_value(field: &str, prefix: &str, exceptions: &[(&str, &str)]) -> String {
    for (path, value) in exceptions {
        if let Some(rest) = field.strip_prefix(path)
            && (rest.is_empty() || rest.starts_with('.'))
        {
            return format!("{value}{rest}");
        }
    }
    format!("{prefix}{}", field.strip_prefix("spec.").unwrap_or(field))
}

fn main() {
    print!("{}", reference_markdown());
}

/// The reference page, in Markdown.
fn reference_markdown() -> String {
    let crd = api::GluesyncPlatform::crd();
    let names = &crd.spec.names;
    let mut out = String::new();
    let _ = writeln!(out, "# {} reference", names.kind);
    out.push_str(
        "\n<!-- Generated from the CRD by `make crd` (the `reference` binary). Change the types in \
         crates/gluesync-engine/src/api/ or the generator in crates/gluesync-operator/src/bin/reference.rs, \
         not this page. -->\n\n",
    );
    let Some(version) = crd.spec.versions.first() else {
        return out;
    };
    let root = version
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref());
    let Some(root) = root else {
        return out;
    };
    let _ = writeln!(
        out,
        "A `{kind}` (short name {short}, category {category}) is {what}: API group `{group}`, version `{version}`, \
         {scope}.",
        kind = names.kind,
        short = code_list(names.short_names.iter().flatten()),
        category = code_list(names.categories.iter().flatten()),
        what = lower_first(root.description.as_deref().unwrap_or_default()),
        group = crd.spec.group,
        version = version.name,
        scope = crd.spec.scope.to_lowercase(),
    );
    out.push_str(
        "\nEach spec field below gives its type, its default (what the API server writes when the field is \
         left out), the values it accepts, its meaning, and the Helm value that sets it, in the \
         `gluesync-operator` chart (`charts/gluesync-operator`) and in the Gluesync kit \
         (`charts/gluesync-kit`, which hands `operator.*` to the gluesync-operator chart). The API server \
         refuses a resource that breaks a limit or one of the [validation rules](#validation-rules). \
         Then come the status fields GKO writes, the `kubectl get` columns, and the annotations, label and \
         finalizer GKO reads or writes.\n",
    );

    let rules = validation_rules(root);
    if let Some(spec) = property(root, "spec") {
        write_spec(&mut out, spec, &rules);
    }
    if let Some(status) = property(root, "status") {
        write_status(&mut out, status);
    }
    write_rules(&mut out, &rules);
    write_printer_columns(&mut out, version);
    write_names(&mut out);
    out
}

/// One field of the schema, found by walking it.
struct Field<'a> {
    path: String,
    schema: &'a JSONSchemaProps,
    required: bool,
}

/// Every field below `schema`, depth first in name order. Arrays and maps of objects are walked into
/// (`status.history[].from`, `status.spilledLists.<key>.count`); arrays and maps of plain values are
/// described by their own field.
fn fields<'a>(path: &str, schema: &'a JSONSchemaProps, out: &mut Vec<Field<'a>>) {
    let required = schema.required.as_deref().unwrap_or_default();
    for (name, child) in schema.properties.iter().flatten() {
        let child_path = format!("{path}.{name}");
        out.push(Field {
            path: child_path.clone(),
            schema: child,
            required: required.contains(name),
        });
        fields(&child_path, child, out);
    }
    if let Some(items) = items(schema) {
        fields(&format!("{path}[]"), items, out);
    }
    if let Some(values) = map_values(schema) {
        fields(&format!("{path}.<key>"), values, out);
    }
}

fn property<'a>(schema: &'a JSONSchemaProps, name: &str) -> Option<&'a JSONSchemaProps> {
    schema.properties.as_ref()?.get(name)
}

fn items(schema: &JSONSchemaProps) -> Option<&JSONSchemaProps> {
    match &schema.items {
        Some(JSONSchemaPropsOrArray::Schema(items)) => Some(items),
        _ => None,
    }
}

fn map_values(schema: &JSONSchemaProps) -> Option<&JSONSchemaProps> {
    match &schema.additional_properties {
        Some(JSONSchemaPropsOrBool::Schema(values)) => Some(values),
        _ => None,
    }
}

/// `string (date-time)`, `array of string`, `map of string`, `object`.
fn type_name(schema: &JSONSchemaProps) -> String {
    match schema.type_.as_deref() {
        Some("array") => match items(schema) {
            Some(items) => format!("array of {}", type_name(items)),
            None => "array".to_string(),
        },
        Some("object") => match map_values(schema) {
            Some(values) => format!("map of {}", type_name(values)),
            None => "object".to_string(),
        },
        Some(t) => match &schema.format {
            Some(format) => format!("{t} ({format})"),
            None => t.to_string(),
        },
        None => "any".to_string(),
    }
}

/// The limits the schema sets on a value: its allowed values, range, length, pattern, size.
fn limits(schema: &JSONSchemaProps) -> Vec<String> {
    let mut found = Vec::new();
    if let Some(values) = &schema.enum_ {
        let values: Vec<String> = values.iter().map(|v| json_text(&v.0)).collect();
        found.push(format!("one of {}", code_list(values.iter())));
    }
    match (schema.minimum, schema.maximum) {
        (Some(min), Some(max)) => found.push(format!("{min} to {max}")),
        (Some(min), None) => found.push(format!("at least {min}")),
        (None, Some(max)) => found.push(format!("at most {max}")),
        (None, None) => {}
    }
    match (schema.min_length, schema.max_length) {
        (Some(min), Some(max)) => found.push(format!("{min} to {max} characters")),
        (Some(min), None) => found.push(format!("at least {min} characters")),
        (None, Some(max)) => found.push(format!("at most {max} characters")),
        (None, None) => {}
    }
    if let Some(pattern) = &schema.pattern {
        found.push(format!("matches `{pattern}`"));
    }
    if let Some(max) = schema.max_items {
        found.push(format!("at most {max} items"));
    }
    if let Some(max) = schema.max_properties {
        found.push(format!("at most {max} entries"));
    }
    for (what, inner) in [
        ("each item", items(schema)),
        ("each value", map_values(schema)),
    ] {
        let Some(inner) = inner else { continue };
        if inner.properties.is_none() {
            let inner = limits(inner);
            if !inner.is_empty() {
                found.push(format!("{what}: {}", inner.join(", ")));
            }
        }
    }
    found
}

/// A JSON value as a reader writes it: strings bare, the rest as compact JSON.
fn json_text(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A description on one line. The boilerplate Kubernetes gives every timestamp says nothing about the
/// field, so it is left out.
fn description(schema: &JSONSchemaProps) -> String {
    let text = schema.description.as_deref().unwrap_or_default();
    if text.starts_with("Time is a wrapper around time.Time") {
        return String::new();
    }
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn code_list<'a>(values: impl Iterator<Item = &'a String>) -> String {
    values
        .map(|v| format!("`{v}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn lower_first(text: &str) -> String {
    let text = text.trim_end_matches('.');
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

fn table_cell(text: &str) -> String {
    text.replace('|', "\\|")
}

/// A CEL rule of the schema: the field it is declared on, and the field it reports (its `fieldPath`).
struct Rule {
    on: String,
    reported_at: String,
    rule: String,
    message: String,
}

fn validation_rules(root: &JSONSchemaProps) -> Vec<Rule> {
    let mut all = vec![Field {
        path: String::new(),
        schema: root,
        required: true,
    }];
    fields("", root, &mut all);
    let mut rules = Vec::new();
    for field in &all {
        for rule in field.schema.x_kubernetes_validations.iter().flatten() {
            let on = field.path.trim_start_matches('.').to_string();
            let reported_at = match &rule.field_path {
                Some(path) => format!("{on}{path}"),
                None => on.clone(),
            };
            rules.push(Rule {
                on,
                reported_at,
                rule: rule.rule.clone(),
                message: rule.message.clone().unwrap_or_default(),
            });
        }
    }
    rules
}

fn write_spec(out: &mut String, spec: &JSONSchemaProps, rules: &[Rule]) {
    out.push_str("\n## Spec\n");
    let _ = writeln!(out, "\n{}", description(spec));
    let mut all = Vec::new();
    fields("spec", spec, &mut all);
    for field in &all {
        let schema = field.schema;
        let _ = writeln!(out, "\n### `{}`\n", field.path);
        let text = description(schema);
        if !text.is_empty() {
            let _ = writeln!(out, "{text}\n");
        }
        let required = if field.required { ", required" } else { "" };
        let _ = writeln!(out, "- Type: {}{required}", type_name(schema));
        let default = match &schema.default {
            Some(value) => format!("`{}`", json_text(&value.0)),
            None => "none".to_string(),
        };
        let _ = writeln!(out, "- Default: {default}");
        let limits = limits(schema);
        if !limits.is_empty() {
            let _ = writeln!(out, "- Allowed: {}", limits.join("; "));
        }
        for rule in rules.iter().filter(|r| r.reported_at == field.path) {
            let _ = writeln!(out, "- Rule: {}", rule.message);
        }
        let note = HELM_NOTES
            .iter()
            .find(|(path, _)| *path == field.path)
            .map(|(_, note)| format!("; {note}"))
            .unwrap_or_default();
        let kit = kit_value(&field.path).map_or_else(
            || "not set by the Gluesync kit, which pins no module".to_string(),
            |v| format!("`{v}` (Gluesync kit)"),
        );
        let _ = writeln!(
            out,
            "- Helm: `{}` (gluesync-operator chart), {kit}{note}",
            operator_chart_value(&field.path),
        );
    }
}

fn write_status(out: &mut String, status: &JSONSchemaProps) {
    out.push_str("\n## Status\n\n");
    let _ = writeln!(
        out,
        "{} GKO writes the status; `[]` stands for every item of a list, `<key>` for every key of a map.\n",
        description(status)
    );
    out.push_str("| Field | Type | Description |\n|---|---|---|\n");
    let mut all = Vec::new();
    fields("status", status, &mut all);
    for field in &all {
        let mut kind = type_name(field.schema);
        let limits = limits(field.schema);
        if !limits.is_empty() {
            let _ = write!(kind, "; {}", limits.join("; "));
        }
        let _ = writeln!(
            out,
            "| `{}` | {} | {} |",
            field.path,
            table_cell(&kind),
            table_cell(&description(field.schema)),
        );
    }
}

fn write_rules(out: &mut String, rules: &[Rule]) {
    out.push_str(
        "\n## Validation rules\n\nBeyond the limits of each field, the API server checks these \
         [CEL](https://kubernetes.io/docs/reference/using-api/cel/) rules (`x-kubernetes-validations`) on \
         every write, and refuses a resource that breaks one with its message.\n\n",
    );
    for rule in rules {
        let at = if rule.reported_at == rule.on {
            String::new()
        } else {
            format!(", reported at `{}`", rule.reported_at)
        };
        let _ = writeln!(
            out,
            "- \"{}\": on `{}`{at}, `{}`",
            rule.message, rule.on, rule.rule
        );
    }
}

fn write_printer_columns(out: &mut String, version: &CustomResourceDefinitionVersion) {
    out.push_str(
        "\n## Columns of `kubectl get gsp`\n\nAfter NAME, which `kubectl` adds:\n\n\
         | Column | Type | JSON path |\n|---|---|---|\n",
    );
    for column in version.additional_printer_columns.iter().flatten() {
        let _ = writeln!(
            out,
            "| {} | {} | `{}` |",
            column.name.to_uppercase(),
            column.type_,
            column.json_path
        );
    }
}

fn write_names(out: &mut String) {
    let types: Vec<String> = [
        api::ComponentType::CoreHub,
        api::ComponentType::Agent,
        api::ComponentType::Module,
        api::ComponentType::ThirdParty,
        api::ComponentType::Operator,
    ]
    .iter()
    .map(|t| t.as_label().to_string())
    .collect();
    let rows = [
        (
            api::CHECK_NOW_ANNOTATION,
            "annotation on the GluesyncPlatform",
            "A new value asks for a catalog check at once: \
             `kubectl annotate gsp gluesync --overwrite gluesync.molo17.com/check-now=\"$(date +%s)\"`."
                .to_string(),
        ),
        (
            api::REQUEST_ANNOTATION,
            "annotation on the GluesyncPlatform",
            "Internal: written, with `spec.requestID`, by an update request of the Core Hub UI (through \
             GKO's Conductor API); it carries the request's id, release channel and user. Do not set it by hand."
                .to_string(),
        ),
        (
            api::FINALIZER,
            "finalizer on the GluesyncPlatform",
            "GKO puts it on before it pauses anything and takes it off once nothing is left to settle: \
             deleting the resource during an update first puts a half-made Core Hub change back and resumes \
             the paused pipelines."
                .to_string(),
        ),
        (
            api::SELF_UPDATE_ANNOTATION,
            "annotation on GKO's own Deployment",
            "`Scheduled`, `RollingOut` or `RollingBack` while GKO updates itself (it mirrors \
             `status.selfUpdate.phase`, and may lag it); while `status.selfUpdate.phase` is `RollingOut` \
             or `RollingBack` the Conductor API answers 503."
                .to_string(),
        ),
        (
            api::TYPE_LABEL,
            "label on a workload",
            format!(
                "The component type, one of {}: GKO manages only the StatefulSets and Deployments of its \
                 namespace that carry it.",
                code_list(types.iter())
            ),
        ),
        (
            api::CONTAINER_ANNOTATION,
            "annotation on a workload",
            "The container whose image GKO changes (default: the first).".to_string(),
        ),
    ];
    out.push_str(
        "\n## Annotations, label and finalizer\n\n| Name | Where | Meaning |\n|---|---|---|\n",
    );
    for (name, place, meaning) in rows {
        let _ = writeln!(out, "| `{name}` | {place} | {} |", table_cell(&meaning));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPERATOR_VALUES: &str = include_str!("../../../../charts/gluesync-operator/values.yaml");
    const KIT_VALUES: &str = include_str!("../../../../charts/gluesync-kit/values.yaml");

    fn values(text: &str) -> serde_yaml::Value {
        serde_yaml::from_str(text).expect("values.yaml parses")
    }

    fn lookup<'a>(values: &'a serde_yaml::Value, name: &str) -> Option<&'a serde_yaml::Value> {
        name.split('.').try_fold(values, |v, key| v.get(key))
    }

    fn spec_fields() -> Vec<String> {
        let crd = api::GluesyncPlatform::crd();
        let root = crd.spec.versions[0]
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .expect("the CRD has a schema");
        let mut all = Vec::new();
        fields("spec", property(root, "spec").expect("a spec"), &mut all);
        all.into_iter().map(|f| f.path).collect()
    }

    /// The checked-in page is the one the CRD generates.
    #[test]
    fn checked_in_reference_matches_the_crd() {
        let checked_in = include_str!("../../../../docs/reference.md");
        assert!(
            checked_in == reference_markdown(),
            "docs/reference.md drifted from the CRD: run `make crd`"
        );
    }

    #[test]
    fn every_operator_chart_value_exists() {
        let values = values(OPERATOR_VALUES);
        let fields = spec_fields();
        assert!(fields.iter().any(|f| f == "spec.coreHub.credentialsSecret"));
        for field in &fields {
            let name = operator_chart_value(field);
            assert!(
                lookup(&values, &in_values(field, &name)).is_some(),
                "{field} maps to {name}, which charts/gluesync-operator/values.yaml does not have"
            );
        }
    }

    /// The other way round: a `platform.*` value that sets no spec field would be missing from the page.
    #[test]
    fn every_platform_value_is_a_spec_field() {
        fn leaves(prefix: &str, value: &serde_yaml::Value, out: &mut Vec<String>) {
            match value.as_mapping() {
                Some(map) if !map.is_empty() => {
                    for (key, child) in map {
                        let key = key.as_str().expect("keys are strings");
                        leaves(&format!("{prefix}.{key}"), child, out);
                    }
                }
                _ => out.push(prefix.to_string()),
            }
        }
        let values = values(OPERATOR_VALUES);
        let mut platform = Vec::new();
        leaves(
            "platform",
            lookup(&values, "platform").unwrap(),
            &mut platform,
        );
        let mapped: Vec<String> = spec_fields()
            .iter()
            .map(|f| operator_chart_value(f))
            .collect();
        for name in platform.iter().filter(|n| *n != "platform.create") {
            assert!(
                mapped.contains(name),
                "{name} sets no spec field the reference knows"
            );
        }
    }

    /// The kit's own names are in its values; the rest go to the gluesync-operator chart as `platform.*`.
    #[test]
    fn every_kit_value_exists() {
        let kit = values(KIT_VALUES);
        let operator = values(OPERATOR_VALUES);
        for field in spec_fields() {
            let Some(name) = kit_value(&field) else {
                continue;
            };
            let name = in_values(&field, &name);
            let found = match name.strip_prefix("operator.") {
                Some(rest) if rest.starts_with("platform.") => lookup(&operator, rest).is_some(),
                _ => lookup(&kit, &name).is_some(),
            };
            assert!(
                found,
                "{field} maps to the kit's {name}, which does not exist"
            );
        }
    }

    #[test]
    fn the_exceptions_are_the_documented_ones() {
        assert_eq!(operator_chart_value("spec.version"), "platform.version");
        assert_eq!(operator_chart_value("spec.requestID"), "platform.requestID");
        assert_eq!(
            operator_chart_value("spec.selfUpdate.enabled"),
            "selfUpdate.enabled"
        );
        assert_eq!(
            kit_value("spec.version").as_deref(),
            Some("gluesyncCoreHub.tag")
        );
        assert_eq!(
            kit_value("spec.updatePolicy").as_deref(),
            Some("operator.updatePolicy")
        );
        assert_eq!(
            kit_value("spec.selfUpdate.enabled").as_deref(),
            Some("operator.selfUpdate.enabled")
        );
        assert_eq!(
            kit_value("spec.coreHub.url").as_deref(),
            Some("operator.platform.coreHub.url")
        );
        // A field whose name merely starts like an exception follows the rule.
        assert_eq!(
            helm_value("spec.versionX", "platform.", KIT_EXCEPTIONS),
            "platform.versionX"
        );
        assert_eq!(kit_value("spec.modules"), None);
    }
}
