/* test_toolcall_grade.c: the tool-call grader's three verdicts kept apart: a call with the right
 * arguments under a wrong name is valid but neither names-correct nor exact, in every position of
 * a multi-call answer (test_sft's cases never had right arguments under a wrong name). */
#include <cjson/cJSON.h>
#include <stdio.h>

#include "core/text/toolcall.h"
#include "tests/check.h"

int main(void)
{
    cJSON *ans = cJSON_Parse("[{\"name\":\"f\",\"arguments\":{\"x\":1}},{\"name\":\"g\",\"arguments\":{\"y\":\"z\"}}]");
    CHECK(ans != NULL, "answers parse");
    struct { const char *gen; int valid, names, exact; } cases[] = {
        {"[{\"name\":\"f\",\"arguments\":{\"x\":1}},{\"name\":\"g\",\"arguments\":{\"y\":\"z\"}}]", 1, 1, 1},
        {"[{\"name\":\"h\",\"arguments\":{\"x\":1}},{\"name\":\"g\",\"arguments\":{\"y\":\"z\"}}]", 1, 0, 0},
        {"[{\"name\":\"f\",\"arguments\":{\"x\":1}},{\"name\":\"G\",\"arguments\":{\"y\":\"z\"}}]", 1, 0, 0},
        {"[{\"name\":\"g\",\"arguments\":{\"x\":1}},{\"name\":\"f\",\"arguments\":{\"y\":\"z\"}}]", 1, 0, 0},
        {"[{\"name\":\"f\",\"arguments\":{\"x\":1}},{\"name\":\"g\",\"arguments\":{\"y\":\"Z\"}}]", 1, 1, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        toolcall_grade g = toolcall_grade_text(cases[i].gen, ans);
        CHECK(g.valid == cases[i].valid && g.names == cases[i].names && g.exact == cases[i].exact,
              "case %zu (%s): valid %d names %d exact %d, want %d %d %d", i, cases[i].gen, g.valid, g.names,
              g.exact, cases[i].valid, cases[i].names, cases[i].exact);
        CHECK(toolcall_match(cases[i].gen, ans) == cases[i].exact, "match case %zu", i);
    }
    cJSON_Delete(ans);
    return check_exit_code("test_toolcall_grade");
}
