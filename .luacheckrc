-- luacheck's settings for the transitions library (src/lib/engine/lua), checked as Redis loads
-- it: scripts/check-lua.mjs assembles it (src/lib/engine/scripts.ts) and runs luacheck over
-- the whole text, so a helper a script names is defined, or luacheck says so.
-- Redis runs Lua 5.1; the globals below are those it gives a function library. Nothing else
-- is global: a misspelled helper, or a variable assigned without `local`, is an error.
std = 'lua51'
max_line_length = 140
read_globals = {
  redis = {
    fields = {
      'call', 'pcall', 'error_reply', 'status_reply', 'sha1hex', 'log', 'register_function',
      'setresp', 'set_repl', 'acl_check_cmd', 'breakpoint', 'debug',
      'LOG_DEBUG', 'LOG_VERBOSE', 'LOG_NOTICE', 'LOG_WARNING',
      'REPL_ALL', 'REPL_AOF', 'REPL_REPLICA', 'REPL_SLAVE', 'REPL_NONE',
      'REDIS_VERSION', 'REDIS_VERSION_NUM',
    },
  },
  cjson = { fields = { 'encode', 'decode', 'encode_keep_buffer', 'decode_array_with_array_mt', 'array_mt', 'empty_array' } },
  'cmsgpack', 'bit', 'struct',
}
