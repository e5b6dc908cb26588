/* frontend/frontend.c — the public entry points: read, parse, lower. Each one
 * checks that the file holds what the caller asked for (a model or a cluster). */
#include "frontend/frontend.h"

static const Ast *parse_as(Arena *a, Diag *d, const Source *src, ParseWant want) {
  if (!src) return NULL;
  const Ast *root = frontend_parse(a, d, src, want);
  if (!root) return NULL;
  if (want == WANT_MODEL && root->kind != AST_MODEL) {
    diag_error(d, root->loc, "expected a model ('model NAME { ... }'), found a cluster");
    return NULL;
  }
  if (want == WANT_CLUSTER && root->kind != AST_CLUSTER) {
    diag_error(d, root->loc, "expected a cluster ('cluster NAME { ... }'), found a model");
    return NULL;
  }
  return root;
}

static Graph *load_model(Arena *a, Diag *d, const Source *src, const char *const *overrides,
                         int noverrides) {
  const Ast *root = parse_as(a, d, src, WANT_MODEL);
  return root ? frontend_lower_model(a, d, root, overrides, noverrides) : NULL;
}

static bool load_cluster(Arena *a, Diag *d, const Source *src, Cluster *out) {
  const Ast *root = parse_as(a, d, src, WANT_CLUSTER);
  return root && frontend_lower_cluster(a, d, root, out);
}

static bool dump_ast(Arena *a, Diag *d, const Source *src, FILE *out) {
  const Ast *root = parse_as(a, d, src, WANT_ANY);
  if (!root) return false;
  ast_dump(root, out);
  return true;
}

Graph *frontend_load_model(Arena *a, Diag *d, const char *path, const char *const *overrides,
                           int noverrides) {
  return load_model(a, d, frontend_source_file(a, d, path), overrides, noverrides);
}

bool frontend_load_cluster(Arena *a, Diag *d, const char *path, Cluster *out) {
  return load_cluster(a, d, frontend_source_file(a, d, path), out);
}

bool frontend_dump_ast(Arena *a, Diag *d, const char *path, FILE *out) {
  return dump_ast(a, d, frontend_source_file(a, d, path), out);
}

Graph *frontend_load_model_buffer(Arena *a, Diag *d, const char *path, const char *text,
                                  size_t len, const char *const *overrides, int noverrides) {
  return load_model(a, d, frontend_source_buffer(a, d, path, text, len), overrides, noverrides);
}

bool frontend_load_cluster_buffer(Arena *a, Diag *d, const char *path, const char *text,
                                  size_t len, Cluster *out) {
  return load_cluster(a, d, frontend_source_buffer(a, d, path, text, len), out);
}

bool frontend_dump_ast_buffer(Arena *a, Diag *d, const char *path, const char *text, size_t len,
                              FILE *out) {
  return dump_ast(a, d, frontend_source_buffer(a, d, path, text, len), out);
}
