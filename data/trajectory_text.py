"""Wording for oracle trajectories (data/trajectory_oracle.py): queries and the one-sentence thoughts.

Every template is filled only with what the agent has already seen: the question's own words,
or names and values read in an earlier tool output. Keys are world relations and attributes
(data/world_plan.py); "located_in_uni" is a university's city (a city's located_in is its country).
"""

# --- queries ---------------------------------------------------------------------------------
NOUN = {"city": "city", "country": "country", "organisation": "company", "university": "university"}
# words added to a name for a keyword query ("Varnholt Industries founder")
REL_WORDS = {
    "born_in": ["birthplace", "born in", "born"], "works_for": ["employer", "works for", "job"],
    "studied_at": ["university", "studied at", "education"], "spouse": ["spouse", "married to", "married"],
    "located_in": ["country", "located in", "location"], "located_in_uni": ["city", "campus", "location"],
    "capital": ["capital", "capital city"], "founded_by": ["founder", "founded by", "founders"],
    "headquartered_in": ["headquarters", "head office", "based in"],
    "created_by": ["creator", "created by", "author"], "published_by": ["publisher", "released by", "label"],
    "held_in": ["venue", "held in", "location"], "organised_by": ["organiser", "organised by", "organizer"],
    "birth_year": ["birth year", "born", "year of birth"], "occupation": ["occupation", "profession", "job"],
    "population": ["population", "inhabitants", "residents"],
    "founded_year": ["founded", "founding year", "established"], "currency": ["currency", "money"],
    "industry": ["industry", "sector", "business"], "employees": ["employees", "staff", "workforce"],
    "students": ["students", "enrolment", "student body"], "kind": ["novel film album", "kind", "type"],
    "release_year": ["release year", "released", "release"], "category": ["event type", "kind of event", "category"],
    "year": ["year", "date", "when held"], "attendance": ["attendance", "visitors", "attended"],
}
# words that match the OBJECT's page when a fact is written only there ("Ela Voss alumni")
INVERSE_WORDS = {
    "born_in": ["born in city natives", "birthplace of"], "works_for": ["employees staff", "employs"],
    "studied_at": ["alumni graduates", "former students"], "located_in": ["cities of country", "cities include"],
    "headquartered_in": ["companies headquartered", "head offices"],
    "published_by": ["catalogue released", "titles issued"], "spouse": ["married spouse"],
    "located_in_uni": ["city home to"], "capital": ["capital of"], "founded_by": ["founded by founder"],
    "created_by": ["works of", "best known for"], "held_in": ["hosted venue"], "organised_by": ["organised the"],
}
QUESTION_QUERIES = {
    "born_in": ["where was {n} born", "birthplace of {n}"], "works_for": ["who does {n} work for", "{n} employer company"],
    "studied_at": ["where did {n} study", "which university did {n} attend"], "spouse": ["who is {n} married to"],
    "located_in": ["which country is {n} in", "where is {n}"], "located_in_uni": ["which city is {n} in", "where is {n}"],
    "capital": ["what is the capital of {n}"], "founded_by": ["who founded {n}", "founder of {n}"],
    "headquartered_in": ["where is {n} headquartered", "headquarters of {n}"],
    "created_by": ["who created {n}", "who made {n}"], "published_by": ["who released {n}", "publisher of {n}"],
    "held_in": ["where was {n} held", "venue of {n}"], "organised_by": ["who organised {n}"],
    "birth_year": ["when was {n} born", "year {n} was born"], "occupation": ["what does {n} do"],
    "population": ["population of {n}", "how many people live in {n}"], "founded_year": ["when was {n} founded"],
    "currency": ["currency of {n}"], "industry": ["what industry is {n} in"], "employees": ["how many employees does {n} have"],
    "students": ["how many students does {n} have"], "kind": ["what is {n}"], "release_year": ["when was {n} released"],
    "category": ["what kind of event was {n}"], "year": ["when did {n} take place"],
    "attendance": ["how many people attended {n}"],
}
# find() texts likely to hit the sentence that states the fact in the subject's own page
FIND_WORDS = {
    "born_in": ["born", "native", "birthplace", "hails"], "works_for": ["works for", "employ", "joined", "position", "team"],
    "studied_at": ["studied", "graduate", "degree", "educated", "enrolled", "attended"],
    "spouse": ["married", "spouse"], "located_in": ["located", "lies", "city in", "country", "part of"],
    "located_in_uni": ["located", "city of", "campus", "home to", "based"],
    "capital": ["capital", "seat of government"], "founded_by": ["founded by", "founder", "started", "founded", "established"],
    "headquartered_in": ["headquarter", "head office", "based"],
    "created_by": ["by", "work of", "creator", "wrote", "directed", "recorded"],
    "published_by": ["released by", "distributed", "release of", "released", "brought out"],
    "held_in": ["held", "took place", "hosted", "venue", "staged"], "organised_by": ["organised", "run by", "responsible"],
    "birth_year": ["born", "birth"], "occupation": ["is"], "population": ["population", "live in", "residents", "inhabitants", "people"],
    "founded_year": ["founded", "founding", "established", "since", "opened", "independent", "first students"],
    "currency": ["currency"], "industry": ["industry", "sector", "company", "firm", "business"],
    "employees": ["employ", "workforce", "staff", "work for"], "students": ["students", "student body"],
    "kind": ["is"], "release_year": ["released", "appeared", "came out", "release"],
    "category": ["was"], "year": ["took place", "held", "dates", "year", "in"],
    "attendance": ["attend", "visitors", "crowd", "people"],
}

# --- what is needed, and the fact once read ----------------------------------------------------
NEED = {  # {n}: the subject's name
    "born_in": ["where {n} was born", "the birthplace of {n}"], "works_for": ["who {n} works for", "the employer of {n}"],
    "studied_at": ["where {n} studied", "which university {n} attended"], "spouse": ["who {n} is married to", "the spouse of {n}"],
    "located_in": ["which country {n} is in", "the country of {n}"], "located_in_uni": ["which city {n} is in", "where {n} is located"],
    "capital": ["the capital of {n}"], "founded_by": ["who founded {n}", "the founder of {n}"],
    "headquartered_in": ["where {n} is headquartered", "the headquarters of {n}"],
    "created_by": ["who created {n}", "the creator of {n}"], "published_by": ["who released {n}", "the publisher of {n}"],
    "held_in": ["where {n} was held", "the venue of {n}"], "organised_by": ["who organised {n}", "the organiser of {n}"],
    "birth_year": ["when {n} was born", "the birth year of {n}"], "occupation": ["what {n} does for a living", "the occupation of {n}"],
    "population": ["the population of {n}", "how many people live in {n}"], "founded_year": ["when {n} was founded", "the founding year of {n}"],
    "currency": ["the currency of {n}"], "industry": ["the industry of {n}"], "employees": ["how many employees {n} has"],
    "students": ["how many students {n} has"], "kind": ["what kind of work {n} is"],
    "release_year": ["when {n} came out", "the release year of {n}"], "category": ["what kind of event {n} was"],
    "year": ["when {n} took place", "the year of {n}"], "attendance": ["how many people attended {n}"],
}
FACT = {  # {n}: subject, {o}: the object's name or the value as written
    "born_in": "{n} was born in {o}", "works_for": "{n} works for {o}", "studied_at": "{n} studied at {o}",
    "spouse": "{n} is married to {o}", "located_in": "{n} is in {o}", "located_in_uni": "{n} is in {o}",
    "capital": "the capital of {n} is {o}", "founded_by": "{n} was founded by {o}",
    "headquartered_in": "{n} is headquartered in {o}", "created_by": "{n} was created by {o}",
    "published_by": "{n} was released by {o}", "held_in": "{n} was held in {o}", "organised_by": "{n} was organised by {o}",
    "birth_year": "{n} was born in {o}", "occupation": "{n} is a {o}", "population": "{n} has a population of {o}",
    "founded_year": "{n} was founded in {o}", "currency": "the currency of {n} is the {o}", "industry": "{n} is in the {o} industry",
    "employees": "{n} has {o} employees", "students": "{n} has {o} students", "kind": "{n} is a {o}",
    "release_year": "{n} came out in {o}", "category": "{n} was a {o}", "year": "{n} took place in {o}",
    "attendance": "{n} was attended by {o} people",
}

# --- thoughts before each call -------------------------------------------------------------------
START = ["First I need to find out {need}.", "I need {need}; I'll search for {n}.", "Let me start with {need}.",
         "To answer this I first need {need}.", "I'll search for {n} to find out {need}.", "First: {need}."]
# Oracle(plan=True): a multi-hop question's later hops named in its first thought, so that the turn
# after the first hop can copy its next need from the plan instead of parsing the question again
PLAN = ["Then I need {need}.", "After that: {need}.", "Then {need}."]
THAT = {"person": "that person", "work": "that work", "organisation": "that company", "city": "that city",
        "country": "that country", "event": "that event", "university": "that university"}
START_QUESTION = ["Let me first search with the question itself.", "I'll start by searching for the whole question.",
                  "First, a search with the question's own words."]
NEXT = ["{fact}; now I need {need}.", "{fact}. Next I need to find out {need}.", "So {fact}. Now {need}.",
        "{fact}; next I'll look up {need}.", "Found it: {fact}. Now I need {need}.", "{fact}. I'll search for {n} next."]
# the same, each opening with the fact, for a fixed opener (Oracle's next_opener) to go before
NEXT_AFTER_OPENER = [t[t.index("{fact}"):] for t in NEXT]
MISS_OTHER = ["The results are about a different {n}; I'll search for {n} the {noun}.",
              "These results are about other entities named like {n}; I'll add \"{noun}\" to the query.",
              "None of these is the {noun} {n}; let me search more specifically."]
MISS_SILENT = ["The result for {n} does not say {need}; another page may mention {n}, so I'll search again.",
               "The snippet of {n} says nothing about {need}; I'll try a search that finds pages mentioning {n}.",
               "{n}'s entry doesn't show {need} here; I'll rephrase the search."]
MISS_NONE = ["None of the results is about {n}; I'll try other words.", "The search did not return {n}; let me rephrase it.",
             "Nothing here mentions {n}; I'll search differently."]
OPEN_NEEDED = ["The snippet of [{d}] does not say {need}; I'll open it.", "I'll open [{d}] to find {need}.",
               "[{d}] is about {n}, but the snippet is cut short; let me read the page.",
               "The result [{d}] should say {need}; I'll open the document."]
FIND_NEEDED = ["The snippet does not show {need}; I'll look for \"{t}\" in [{d}].",
               "Let me find the sentences of [{d}] that mention \"{t}\".", "I'll search inside [{d}] for \"{t}\".",
               "[{d}] should state {need}; I'll find \"{t}\" in it."]
OPEN_EXTRA = ["I'll open [{d}] to read it in full.", "Let me open [{d}] to confirm {need}.",
              "To be sure about {need}, I'll read [{d}]."]
FIND_EXTRA = ["To check {need}, I'll find \"{t}\" in [{d}].", "Let me confirm {need} by searching [{d}] for \"{t}\"."]
# after a find in the known entity's own page ({own}) that did not show the fact
FIND_MISS_OTHER = ["[{own}] does not say {need}, but [{d}] mentions {n}; I'll find \"{t}\" in it.",
                   "Not in [{own}]. The result [{d}] mentions {n}; let me look for \"{t}\" there.",
                   "[{own}] says nothing about {need}. I'll search inside [{d}] for \"{t}\"."]
OPEN_MISS_OTHER = ["[{own}] does not say {need}, but [{d}] mentions {n}; I'll open it.",
                   "Not in [{own}]; let me read [{d}], which mentions {n}."]
FIND_MISS_SEARCH = ["[{own}] does not say {need}; another page may mention {n}, so I'll search again.",
                    "Nothing about {need} in [{own}]; I'll try a search that finds pages mentioning {n}.",
                    "That did not show {need}; rather than look in [{own}] again, I'll rephrase the search."]
# the check that opens every turn after a tool output (Oracle's check_first): the need, then the fact
# or that it is not shown yet, so the choice to move on is made next to the evidence
CHECK, NOT_SHOWN = "Check {need}: {fact}.", "not shown"
ALREADY = ["I have also read that {fact}", "what I read also says {fact}", "as already shown, {fact}"]
NEXT_PAGE = ["Page {p0} does not say it; I'll read page {p}.", "Not on this page; let me open page {p}."]

# --- comparisons ----------------------------------------------------------------------------------
COMPARE_START = ["I need {attr} of both {a} and {b}; first {a}.", "To compare, I need {need}. Let me start with {a}.",
                 "I'll look up {a} first, then {b}.", "First I need {need}."]
COMPARE_NEXT = ["{fact}. Now I need {need}.", "{fact}; next, {need}.", "So {fact}. Now {b}."]
COMPARE_NEXT_AFTER_OPENER = [t[t.index("{fact}"):] for t in COMPARE_NEXT]
ATTR_NOUN = {"birth_year": "the birth year", "population": "the population", "founded_year": "the founding year",
             "employees": "the number of employees", "students": "the number of students",
             "release_year": "the release year", "year": "the year", "attendance": "the attendance",
             "occupation": "the occupation", "industry": "the industry", "currency": "the currency",
             "kind": "the kind", "category": "the category", "born_in": "the birthplace", "works_for": "the employer",
             "studied_at": "the university", "spouse": "the spouse", "located_in": "the country",
             "located_in_uni": "the city", "capital": "the capital", "founded_by": "the founder",
             "headquartered_in": "the headquarters city", "created_by": "the creator", "published_by": "the publisher",
             "held_in": "the host city", "organised_by": "the organiser"}

# --- inverse hops ("Which company did X found?"): {n} is the known object, {o} the subject found ----
INVERSE = {  # key: (REL_WORDS, QUESTION_QUERIES, FIND_WORDS, INVERSE_WORDS, NEED, FACT)
    "inv:founded_by": (["founded", "company founded", "founder of"], ["which company did {n} found"],
                       ["founded", "founder", "established"], ["founded by"], ["which company {n} founded"], "{n} founded {o}"),
    "inv:created_by": (["works", "created", "known for"], ["what did {n} create", "work created by {n}"],
                       ["wrote", "directed", "recorded", "works", "known for", "by"], ["created by", "work of"],
                       ["which work {n} created"], "{n} created {o}"),
    "inv:capital": (["capital", "capital of"], ["which country has {n} as its capital"], ["capital", "government"],
                    ["capital is", "capital city"], ["which country has {n} as its capital"], "{n} is the capital of {o}"),
    "inv:located_in": (["cities", "city in"], ["which cities are in {n}"], ["cities", "include", "contains"],
                       ["city located in", "lies in"], ["which city lies in {n}"], "{o} is in {n}"),
    "inv:located_in_uni": (["university", "universities"], ["which university is in {n}"],
                           ["home to", "located", "campus", "higher education"], ["university located in", "campus"],
                           ["which university is in {n}"], "{o} is in {n}"),
    "inv:held_in": (["event hosted", "hosted", "held in"], ["which event was held in {n}"],
                    ["hosted", "took place", "venue", "held", "came to"], ["held in", "took place in"],
                    ["which event was held in {n}"], "{o} was held in {n}"),
    "inv:organised_by": (["organised", "events organised"], ["which event did {n} organise"],
                         ["organised", "organiser", "ran", "put on"], ["organised by", "run by"],
                         ["which event {n} organised"], "{n} organised {o}"),
    "inv:headquartered_in": (["companies headquartered", "headquarters", "based in"],
                             ["which company is headquartered in {n}"], ["headquarters", "based", "head offices"],
                             ["headquartered in", "head office"], ["which company is headquartered in {n}"],
                             "{o} is headquartered in {n}"),
}
for _key, (_words, _asks, _finds, _inverse, _need, _fact) in INVERSE.items():
    REL_WORDS[_key], QUESTION_QUERIES[_key], FIND_WORDS[_key] = _words, _asks, _finds
    INVERSE_WORDS[_key], NEED[_key], FACT[_key] = _inverse, _need, _fact

PAIR_END = ["{fa}, and {fb}.", "{fa}; {fb}.", "I found that {fa} and {fb}."]
WINNER = ["So {a} has the {adj} {noun}.", "That makes the {noun} of {a} the {adj} one."]
SAME, DIFFERENT = ["That is the same.", "Both are the same."], ["Those are different.", "They differ."]
