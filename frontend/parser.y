/* frontend/parser.y — the grammar of model and cluster files.
 *
 * A pure, reentrant parser with locations. Actions only build AST nodes through
 * the constructors of parse_ctx.h; what a construct means (is this name a param,
 * does this op take two inputs) is decided later in lower.c, which is why the
 * grammar accepts statements such as `param` inside a repeat body: the lowering
 * then says exactly what is wrong instead of a bare syntax error. Lists are
 * left-recursive so the parser stack stays flat however long a file is.
 * Syntax errors go through parse_report_syntax ("expected X, found Y").
 */
%define api.pure full
%define parse.error custom
%locations
%parse-param {ParseCtx *ctx} {void *scanner}
%lex-param {void *scanner}

%code requires {
#include "frontend/parse_ctx.h"
typedef struct AstList { Ast *first, *last; } AstList;
}

%code {
#include "lexer.h"
static void yyerror(YYLTYPE *loc, ParseCtx *ctx, void *scanner, const char *msg);
#define L(l) (l).first_line, (l).first_column
}

%union {
  int64_t ival;
  double fval;
  const char *str;
  Ast *node;
  AstList list;
}

%token END 0 "end of file"
%token LEXERR "invalid token"
%token MODEL "'model'" CLUSTER "'cluster'" PARAM "'param'" INPUT "'input'"
%token WEIGHT "'weight'" REPEAT "'repeat'" MINIMIZE "'minimize'" TRAIN "'train'"
%token NODECAY "'nodecay'" IF "'if'" ELSE "'else'"
%token <ival> INT "integer"
%token <fval> FLOAT "number"
%token <str> IDENT "name" STRING "string"

%type <node> file item ifstmt elsepart setting type expr arg
%type <list> items settings dims dimlist args arglist
%type <ival> nodecay

%left '+' '-'
%left '*' '/' '%'
%precedence NEG

%%

file
  : MODEL IDENT '{' items '}'      { $$ = ast_new(ctx, AST_MODEL, L(@1)); $$->name = $2;
                                     $$->name_loc = pctx_loc(ctx, L(@2)); $$->list = $4.first;
                                     ctx->root = $$; }
  | CLUSTER IDENT '{' settings '}' { $$ = ast_new(ctx, AST_CLUSTER, L(@1)); $$->name = $2;
                                     $$->name_loc = pctx_loc(ctx, L(@2)); $$->list = $4.first;
                                     ctx->root = $$; }
  ;

items
  : %empty                         { $$.first = $$.last = NULL; }
  | items item                     { $$ = $1; ast_append(&$$.first, &$$.last, $2); }
  ;

item
  : PARAM IDENT '=' expr ';'       { $$ = ast_new(ctx, AST_PARAM, L(@1)); $$->name = $2;
                                     $$->name_loc = pctx_loc(ctx, L(@2)); $$->a = $4; }
  | INPUT IDENT ':' type ';'       { $$ = ast_new(ctx, AST_INPUT, L(@1)); $$->name = $2;
                                     $$->name_loc = pctx_loc(ctx, L(@2)); $$->a = $4; }
  | WEIGHT IDENT ':' type '=' expr nodecay ';'
                                   { $$ = ast_new(ctx, AST_WEIGHT, L(@1)); $$->name = $2;
                                     $$->name_loc = pctx_loc(ctx, L(@2)); $$->a = $4;
                                     $$->b = $6; $$->flag = $7 != 0; }
  | IDENT '=' expr ';'             { $$ = ast_new(ctx, AST_ASSIGN, L(@1)); $$->name = $1;
                                     $$->name_loc = pctx_loc(ctx, L(@1)); $$->a = $3; }
  | REPEAT IDENT '[' expr ']' '{' items '}'
                                   { $$ = ast_new(ctx, AST_REPEAT, L(@1)); $$->name = $2;
                                     $$->name_loc = pctx_loc(ctx, L(@2)); $$->a = $4;
                                     $$->list = $7.first; }
  | MINIMIZE IDENT ';'             { $$ = ast_new(ctx, AST_MINIMIZE, L(@1)); $$->name = $2;
                                     $$->name_loc = pctx_loc(ctx, L(@2)); }
  | TRAIN '{' settings '}'         { $$ = ast_new(ctx, AST_TRAIN, L(@1)); $$->list = $3.first; }
  | ifstmt                         { $$ = $1; }
  ;

/* Braces are required, so an else always belongs to the nearest if. */
ifstmt
  : IF expr '{' items '}' elsepart { $$ = ast_new(ctx, AST_IF, L(@1)); $$->a = $2;
                                     $$->list = $4.first; $$->b = $6; }
  ;

elsepart
  : %empty                         { $$ = NULL; }
  | ELSE '{' items '}'             { $$ = $3.first; }
  | ELSE ifstmt                    { $$ = $2; }
  ;

nodecay
  : %empty                         { $$ = 0; }
  | NODECAY                        { $$ = 1; }
  ;

settings
  : %empty                         { $$.first = $$.last = NULL; }
  | settings setting               { $$ = $1; ast_append(&$$.first, &$$.last, $2); }
  ;

setting
  : IDENT '=' expr ';'             { $$ = ast_new(ctx, AST_SETTING, L(@1)); $$->name = $1;
                                     $$->name_loc = pctx_loc(ctx, L(@1)); $$->a = $3; }
  ;

type
  : IDENT '[' dims ']'             { $$ = ast_new(ctx, AST_TYPE, L(@1)); $$->name = $1;
                                     $$->name_loc = $$->loc; $$->list = $3.first; }
  ;

dims
  : %empty                         { $$.first = $$.last = NULL; }
  | dimlist                        { $$ = $1; }
  ;

dimlist
  : expr                           { $$.first = $$.last = NULL; ast_append(&$$.first, &$$.last, $1); }
  | dimlist ',' expr               { $$ = $1; ast_append(&$$.first, &$$.last, $3); }
  ;

expr
  : INT                            { $$ = ast_new(ctx, AST_INT, L(@1)); $$->ival = $1; }
  | FLOAT                          { $$ = ast_new(ctx, AST_FLOAT, L(@1)); $$->fval = $1; }
  | STRING                         { $$ = ast_new(ctx, AST_STRING, L(@1)); $$->name = $1; }
  | IDENT                          { $$ = ast_new(ctx, AST_NAME, L(@1)); $$->name = $1;
                                     $$->name_loc = $$->loc; }
  | IDENT '(' args ')'             { $$ = ast_call(ctx, $1, $3.first, L(@1)); }
  | '(' expr ')'                   { $$ = $2; }
  | '-' expr %prec NEG             { $$ = ast_unary(ctx, $2, L(@1)); }
  | expr '+' expr                  { $$ = ast_binary(ctx, '+', $1, $3, L(@2)); }
  | expr '-' expr                  { $$ = ast_binary(ctx, '-', $1, $3, L(@2)); }
  | expr '*' expr                  { $$ = ast_binary(ctx, '*', $1, $3, L(@2)); }
  | expr '/' expr                  { $$ = ast_binary(ctx, '/', $1, $3, L(@2)); }
  | expr '%' expr                  { $$ = ast_binary(ctx, '%', $1, $3, L(@2)); }
  ;

args
  : %empty                         { $$.first = $$.last = NULL; }
  | arglist                        { $$ = $1; }
  ;

arglist
  : arg                            { $$.first = $$.last = NULL; ast_append(&$$.first, &$$.last, $1); }
  | arglist ',' arg                { $$ = $1; ast_append(&$$.first, &$$.last, $3); }
  ;

arg
  : expr                           { $$ = ast_arg(ctx, NULL, $1, L(@1)); }
  | IDENT '=' expr                 { $$ = ast_arg(ctx, $1, $3, L(@1)); }
  ;

%%

/* Called by bison for "expected X, found Y": passes the symbol names on. */
static int yyreport_syntax_error(const yypcontext_t *yyctx, ParseCtx *ctx, void *scanner) {
  (void)scanner;
  yysymbol_kind_t found = yypcontext_token(yyctx);
  if (found == YYSYMBOL_LEXERR) return 0; /* the lexer already said what is wrong */
  enum { MAXEXP = 32 };
  yysymbol_kind_t exp[MAXEXP];
  int n = yypcontext_expected_tokens(yyctx, exp, MAXEXP);
  const char *names[MAXEXP];
  for (int i = 0; i < n && i < MAXEXP; i++) names[i] = yysymbol_name(exp[i]);
  const YYLTYPE *loc = yypcontext_location(yyctx);
  parse_report_syntax(ctx, loc->first_line, loc->first_column, yysymbol_name(found), names,
                      n < 0 ? 0 : n);
  return 0;
}

/* Only "memory exhausted" (the parser stack outgrew YYMAXDEPTH) comes here. */
static void yyerror(YYLTYPE *loc, ParseCtx *ctx, void *scanner, const char *msg) {
  (void)scanner;
  parse_report_message(ctx, loc->first_line, loc->first_column, msg);
}
