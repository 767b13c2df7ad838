//! Argo CD's health of a GluesyncPlatform: `deploy/argocd/health.lua` run the way Argo CD runs it, in a
//! Lua 5.1 with the base library only. Shared by the fixture tests (`argocd_health.rs`) and the tests that
//! read the live resource (`kstatus.rs`).

use mlua::{Lua, LuaOptions, StdLib, Table};
use serde_json::Value;

pub const HEALTH_LUA: &str = include_str!("../../../../deploy/argocd/health.lua");

/// A Lua state with the base library only (in Lua 5.1 that includes `coroutine`): no `string`, `table`,
/// `math`, `os`, `io`, `debug` or `package`.
pub fn base_lua() -> Lua {
    Lua::new_with(StdLib::NONE, LuaOptions::default()).expect("a Lua state with the base library")
}

/// JSON to Lua as Argo CD's `decodeValue` does it: objects and arrays become tables (arrays 1-based),
/// numbers become Lua numbers, `null` becomes nil (so the key is absent).
pub fn to_lua(lua: &Lua, value: &Value) -> mlua::Result<mlua::Value> {
    Ok(match value {
        Value::Null => mlua::Value::Nil,
        Value::Bool(b) => mlua::Value::Boolean(*b),
        Value::Number(n) => mlua::Value::Number(n.as_f64().unwrap_or_default()),
        Value::String(s) => mlua::Value::String(lua.create_string(s)?),
        Value::Array(items) => {
            let t = lua.create_table()?;
            for item in items {
                t.raw_push(to_lua(lua, item)?)?;
            }
            mlua::Value::Table(t)
        }
        Value::Object(map) => {
            let t = lua.create_table()?;
            for (k, v) in map {
                t.raw_set(k.as_str(), to_lua(lua, v)?)?;
            }
            mlua::Value::Table(t)
        }
    })
}

/// The health Argo CD would show for `obj`: (status, message).
pub fn argocd_health(obj: &Value) -> (String, String) {
    let lua = base_lua();
    lua.globals()
        .set("obj", to_lua(&lua, obj).expect("obj converts"))
        .expect("obj is set");
    let hs: Table = lua
        .load(HEALTH_LUA)
        .set_name("health.lua")
        .eval()
        .unwrap_or_else(|e| panic!("health.lua raised an error on {obj}: {e}"));
    let status: String = hs.get("status").expect("the health has a status");
    let message: String = hs.get("message").expect("the health has a message");
    assert!(
        [
            "Healthy",
            "Progressing",
            "Degraded",
            "Suspended",
            "Missing",
            "Unknown"
        ]
        .contains(&status.as_str()),
        "{status:?} is no health status Argo CD accepts"
    );
    (status, message)
}
