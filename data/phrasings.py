"""Phrasing templates for question synthesis (data/questions.py), in three disjoint pools.

Every relation and question type has templates in each pool: `sft` (what SFT trains on),
`rl` (added for RL, dev and test) and `heldout` (only in test_heldout). Heldout templates use
other syntactic frames, not synonyms: imperatives ("Tell me ..."), truth questions ("Is it true
that ..."), two-sentence frames ("Consider the founder of X. Where was this person born?").

Kinds of templates (section header `## <kind> <entity type or *> <relation/attribute>`):
  ask   a final question about {x}: "Where was {x} born?", "{X} was born in which city?"
  np    a noun phrase for the relation's object: "the founder of {x}", "{x}'s founder"
  inv   the inverse question, asking for the subject: "Which company did {x} found?"
  cmp   a comparison of {a} and {b}, tagged [min] or [max]: which one has the smaller value
  same  a yes/no question whether {a} and {b} share the relation's object
  frame a two-sentence multi-hop question (heldout only): {np} the entity before the last hop,
        {Qd} / {qd} the last question about it, put as "this person" ("Consider {np}. {Qd}");
        otherwise a multi-hop question is the nested question alone
Placeholders: {x} / {X} the subject (lower / sentence-initial form); {x}'s becomes "X's" (or
"X'" after an s) and such templates only take a name or "this person", never a nested phrase.
Multi-hop questions nest np templates into an ask template, all from one pool:
"Where was the founder of X born?", "The person who founded X was born in which city?".

    from data.phrasings import chain_text, compare_text, same_text, inverse_text, TEMPLATES
"""
import hashlib
import random
import re
from dataclasses import dataclass

POOLS = ("sft", "rl", "heldout")
DEM = {"person": "this person", "city": "this city", "country": "this country",
       "organisation": "this company", "university": "this university", "work": "this work",
       "event": "this event"}

_TEXT = """
## frame * multi
heldout: Consider {np}. {Qd} | Think about {np}: {qd}

## ask person occupation
sft: What is the occupation of {x}? | What does {x} do for a living? | What is {x}'s profession?
rl: {X} works in which profession? | Name the occupation of {x}. | Which profession does {x} have?
heldout: Tell me how {x} earns a living. | By profession, {x} is what? | I need the line of work of {x}.
## ask person birth_year
sft: In what year was {x} born? | When was {x} born? | What is the birth year of {x}?
rl: {X} was born in which year? | Name the year of {x}'s birth. | Give the year when {x} was born.
heldout: Tell me the year that saw the birth of {x}. | {X} came into the world in what year? | Find out the year of birth of {x}.
## ask person born_in
sft: Where was {x} born? | In which city was {x} born? | What is the birthplace of {x}?
rl: {X} was born in which city? | Name the city where {x} was born. | Which city is {x}'s birthplace?
heldout: Tell me the city {x} hails from. | {X} came into the world in what city? | Is there a city {x} was born in? Name it.
## ask person works_for
sft: Who does {x} work for? | Which company employs {x}? | What is the employer of {x}?
rl: {X} works for which company? | Name the employer of {x}. | Which organisation is {x}'s employer?
heldout: At what firm is {x} on the payroll? | Tell me which company pays {x}'s salary. | {X} draws a salary from which firm?
## ask person studied_at
sft: Where did {x} study? | Which university did {x} attend? | What is the alma mater of {x}?
rl: {X} studied at which university? | Name the university {x} attended. | Which institution is {x}'s alma mater?
heldout: Tell me where {x} went to university. | {X} was educated at what institution? | From which school did {x} graduate?
## ask person spouse
sft: Who is {x} married to? | Who is the spouse of {x}? | Whom did {x} marry?
rl: {X} is married to whom? | Name the spouse of {x}. | Who is {x}'s partner in marriage?
heldout: Tell me the name of the person who wed {x}. | {X} tied the knot with which person? | With whom did {x} exchange wedding vows?
## ask * population
sft: What is the population of {x}? | How many people live in {x}? | How many inhabitants does {x} have?
rl: {X} has how many inhabitants? | Give the population of {x}. | What is {x}'s population?
heldout: Tell me the number of residents of {x}. | {X} is home to how many people? | Counting every resident, how big is {x}?
## ask * founded_year
sft: When was {x} founded? | In what year was {x} founded? | What is the founding year of {x}?
rl: {X} was founded in which year? | Name the year {x} was established. | In which year was {x} established?
heldout: Tell me the year in which {x} came into being. | {X} dates from what year? | Going back to its origins, when did {x} begin?
## ask city located_in
sft: In which country is {x}? | Which country is {x} located in? | What country is {x} in?
rl: {X} lies in which country? | Name the country where {x} is located. | {X} is a city in which country?
heldout: Tell me the country that contains {x}. | To which nation does {x} belong? | {X} can be found within the borders of what country?
## ask country currency
sft: What is the currency of {x}? | Which currency is used in {x}? | What currency does {x} use?
rl: {X} uses which currency? | Name the currency of {x}. | What is {x}'s currency?
heldout: Tell me what money people pay with in {x}. | In {x}, what is the legal tender? | Shoppers in {x} pay in what?
## ask country capital
sft: What is the capital of {x}? | Which city is the capital of {x}? | What is the capital city of {x}?
rl: {X} has which city as its capital? | Name the capital of {x}. | Which city is {x}'s capital?
heldout: Tell me the seat of government of {x}. | Where does the government of {x} sit? | From which city is {x} governed?
## ask organisation industry
sft: What industry is {x} in? | In which industry does {x} operate? | What is the industry of {x}?
rl: {X} operates in what industry? | Name the industry of {x}. | Which industry is {x}'s business?
heldout: Tell me the line of business of {x}. | What sector does {x} do business in? | {X} makes its money in which sector?
## ask organisation employees
sft: How many employees does {x} have? | What is the number of employees of {x}? | How many people does {x} employ?
rl: {X} employs how many people? | Give the headcount of {x}. | What is {x}'s number of employees?
heldout: Tell me how many people work at {x}. | What size is the workforce of {x}? | How many staff are on the payroll of {x}?
## ask organisation founded_by
sft: Who founded {x}? | Who is the founder of {x}? | Who established {x}?
rl: {X} was founded by whom? | Name the founder of {x}. | Who is {x}'s founder?
heldout: Tell me who set up {x}. | {X} owes its existence to which person? | Which person is credited with starting {x}?
## ask organisation headquartered_in
sft: Where is {x} headquartered? | In which city is {x} headquartered? | Where are the headquarters of {x}?
rl: {X} has its headquarters in which city? | Name the city where {x} is headquartered. | Which city hosts {x}'s head office?
heldout: Tell me the city that {x} is run from. | From which city is {x} managed? | The head office of {x} sits in what city?
## ask university students
sft: How many students does {x} have? | What is the student enrolment of {x}? | How many students are enrolled at {x}?
rl: {X} enrols how many students? | Give the number of students at {x}. | What is {x}'s student count?
heldout: Tell me the size of the student body of {x}. | How large is the student population at {x}? | Counting all its students, how big is {x}?
## ask university located_in
sft: Where is {x} located? | In which city is {x}? | Which city is {x} located in?
rl: {X} is located in which city? | Name the city where {x} is located. | {X} is based in what city?
heldout: Tell me the city that is home to {x}. | To visit {x}, which city would you travel to? | The campus of {x} is in which city?
## ask work kind
sft: What kind of work is {x}? | What type of work is {x}? | What sort of work is {x}?
rl: {X} is what kind of work? | Name the kind of work {x} is. | Which kind of work is {x}?
heldout: Tell me the medium of {x}. | In what form was {x} made? | {X} belongs to which category of creative work?
## ask work release_year
sft: When was {x} released? | In what year was {x} released? | What is the release year of {x}?
rl: {X} was released in which year? | Name the year {x} was released. | What is {x}'s year of release?
heldout: Tell me the year {x} came out. | {X} first appeared in what year? | Audiences first got {x} in which year?
## ask work created_by
sft: Who created {x}? | Who is the creator of {x}? | Who made {x}?
rl: {X} was created by whom? | Name the creator of {x}. | Who is {x}'s creator?
heldout: Tell me who is behind {x}. | {X} is the work of which person? | Credit for {x} goes to which person?
## ask work published_by
sft: Who published {x}? | Which company published {x}? | What is the publisher of {x}?
rl: {X} was released by which company? | Name the publisher of {x}. | Which company is {x}'s publisher?
heldout: Tell me which company put out {x}. | Under which company's name did {x} come out? | {X} reached the public through which firm?
## ask event category
sft: What kind of event is {x}? | What type of event is {x}? | What sort of event is {x}?
rl: {X} is what kind of event? | Name the kind of event {x} is. | Which kind of event is {x}?
heldout: Tell me the format of {x}. | As a gathering, what was {x}? | {X} falls under which category of event?
## ask event year
sft: In what year did {x} take place? | When was {x} held? | What year was {x} held in?
rl: {X} took place in which year? | Name the year of {x}. | In which year was {x} held?
heldout: Tell me the year {x} happened. | {X} was staged in what year? | Looking at the calendar, when did {x} happen?
## ask event attendance
sft: How many people attended {x}? | What was the attendance at {x}? | How many attendees did {x} have?
rl: {X} drew how many attendees? | Give the attendance of {x}. | What was {x}'s attendance?
heldout: Tell me the number of visitors {x} attracted. | How big a crowd turned up for {x}? | Counting every visitor, how well attended was {x}?
## ask event held_in
sft: Where was {x} held? | In which city was {x} held? | Where did {x} take place?
rl: {X} took place in which city? | Name the host city of {x}. | Which city was {x}'s host?
heldout: Tell me the city that played host to {x}. | {X} was staged in what city? | To attend {x}, which city did visitors travel to?
## ask event organised_by
sft: Who organised {x}? | Which company organised {x}? | What company was the organiser of {x}?
rl: {X} was organised by which company? | Name the organiser of {x}. | Which company is {x}'s organiser?
heldout: Tell me the company that staged {x}. | Which firm was behind {x}? | {X} was put on by what firm?

## np person born_in
sft: the birthplace of {x} | the city where {x} was born
rl: {x}'s birthplace | the city in which {x} was born
heldout: the city {x} hails from | the city that saw the birth of {x}
## np person works_for
sft: the employer of {x} | the company {x} works for
rl: {x}'s employer | the company that employs {x}
heldout: the firm that {x} draws a salary from | the firm paying the salary of {x}
## np person studied_at
sft: the alma mater of {x} | the university {x} attended
rl: {x}'s alma mater | the university where {x} studied
heldout: the institution that educated {x} | the school {x} graduated from
## np person spouse
sft: the spouse of {x} | the person married to {x}
rl: {x}'s spouse | the person whom {x} married
heldout: the person who wed {x} | the person {x} exchanged vows with
## np city located_in
sft: the country where {x} is located | the country {x} is in
rl: {x}'s country | the country in which {x} lies
heldout: the nation containing {x} | the nation to which {x} belongs
## np country capital
sft: the capital of {x} | the capital city of {x}
rl: {x}'s capital | the city that is the capital of {x}
heldout: the seat of government of {x} | the city {x} is governed from
## np organisation founded_by
sft: the founder of {x} | the person who founded {x}
rl: {x}'s founder | the person who established {x}
heldout: whoever set up {x} | the individual credited with starting {x}
## np organisation headquartered_in
sft: the city where {x} is headquartered | the headquarters city of {x}
rl: {x}'s headquarters city | the city in which {x} has its headquarters
heldout: the city {x} is run from | the city housing the head office of {x}
## np university located_in
sft: the city where {x} is located | the home city of {x}
rl: {x}'s home city | the city that {x} is in
heldout: the city that is home to {x} | the city hosting the campus of {x}
## np work created_by
sft: the creator of {x} | the person who created {x}
rl: {x}'s creator | the person who made {x}
heldout: the person behind {x} | whoever was responsible for {x}
## np work published_by
sft: the publisher of {x} | the company that published {x}
rl: {x}'s publisher | the company that released {x}
heldout: the company that put out {x} | the firm under whose name {x} came out
## np event held_in
sft: the city where {x} was held | the host city of {x}
rl: {x}'s host city | the city in which {x} took place
heldout: the city that played host to {x} | the city {x} was staged in
## np event organised_by
sft: the organiser of {x} | the company that organised {x}
rl: {x}'s organiser | the organisation that put on {x}
heldout: the firm behind {x} | whoever staged {x}

## inv organisation founded_by
sft: Which company did {x} found? | What company was founded by {x}?
rl: {X} founded which company? | Name the company founded by {x}.
heldout: Tell me the firm that {x} set up. | Which business owes its existence to {x}?
## inv work created_by
sft: Which work did {x} create? | What work was created by {x}?
rl: {X} created which work? | Name the work created by {x}.
heldout: Tell me the title of the work {x} is behind. | For which work does credit go to {x}?
## inv country capital
sft: Of which country is {x} the capital? | Which country has {x} as its capital?
rl: {X} is the capital of which country? | Name the country whose capital is {x}.
heldout: Tell me the nation governed from {x}. | Which nation has its seat of government in {x}?
## inv city located_in
sft: Which city is located in {x}? | What city lies in {x}?
rl: {X} contains which city? | Name the city located in {x}.
heldout: Tell me the city found within {x}. | Within the borders of {x}, which city is there?
## inv event held_in
sft: Which event was held in {x}? | What event took place in {x}?
rl: {X} hosted which event? | Name the event held in {x}.
heldout: Tell me the event staged in {x}. | Which gathering did {x} play host to?
## inv event organised_by
sft: Which event did {x} organise? | What event was organised by {x}?
rl: {X} organised which event? | Name the event organised by {x}.
heldout: Tell me the event that {x} put on. | Which gathering was staged by {x}?
## inv organisation headquartered_in
sft: Which company is headquartered in {x}? | What company has its headquarters in {x}?
rl: {X} is home to the headquarters of which company? | Name the company headquartered in {x}.
heldout: Tell me the firm run from {x}. | Which business keeps its head office in {x}?
## inv university located_in
sft: Which university is located in {x}? | What university is in {x}?
rl: {X} is home to which university? | Name the university located in {x}.
heldout: Tell me the institution whose campus is in {x}. | Studying in {x} means attending which university?

## cmp person birth_year
sft: Who is older, {a} or {b}? [min] | Who was born first, {a} or {b}? [min] | Which of {a} and {b} was born later? [max]
rl: Between {a} and {b}, who is the elder? [min] | {A} or {b}: who was born more recently? [max] | Of {a} and {b}, which person is younger? [max]
heldout: Tell me which of these two came into the world first: {a} or {b}. [min] | Looking at {a} and {b}, whose birth came later? [max] | Is {a} older than {b}, or is it the reverse? Name the older one. [min]
## cmp * founded_year
sft: Which was founded earlier, {a} or {b}? [min] | Which is older, {a} or {b}? [min] | Which of {a} and {b} was founded more recently? [max]
rl: {A} or {b}: which was established first? [min] | Between {a} and {b}, which one is newer? [max] | Of {a} and {b}, which has the earlier founding year? [min]
heldout: Tell me which of these was established first: {a} or {b}. [min] | Looking at {a} and {b}, whose founding came later? [max] | Was {a} founded before {b}, or is it the reverse? Name the older one. [min]
## cmp * population
sft: Which has more people, {a} or {b}? [max] | Which is larger by population, {a} or {b}? [max] | Which of {a} and {b} has the smaller population? [min]
rl: {A} or {b}: which is more populous? [max] | Between {a} and {b}, which has fewer inhabitants? [min] | Of {a} and {b}, which has the larger population? [max]
heldout: Tell me which place is home to more people: {a} or {b}. [max] | Looking at {a} and {b}, where do fewer people live? [min] | Does {a} have more residents than {b}, or is it the reverse? Name the bigger one. [max]
## cmp organisation employees
sft: Which company has more employees, {a} or {b}? [max] | Which of {a} and {b} has fewer employees? [min]
rl: {A} or {b}: which employs more people? [max] | Between {a} and {b}, which is the smaller employer? [min]
heldout: Tell me which firm has the bigger workforce: {a} or {b}. [max] | Looking at {a} and {b}, which one has fewer people on its payroll? [min]
## cmp university students
sft: Which university has more students, {a} or {b}? [max] | Which of {a} and {b} has fewer students? [min]
rl: {A} or {b}: which enrols more students? [max] | Between {a} and {b}, which has the smaller student body? [min]
heldout: Tell me which institution teaches more students: {a} or {b}. [max] | Looking at {a} and {b}, where do fewer students study? [min]
## cmp work release_year
sft: Which was released first, {a} or {b}? [min] | Which of {a} and {b} came out later? [max]
rl: {A} or {b}: which was released earlier? [min] | Between {a} and {b}, which is the more recent release? [max]
heldout: Tell me which of these two appeared first: {a} or {b}. [min] | Looking at {a} and {b}, whose release came later? [max]
## cmp event year
sft: Which took place first, {a} or {b}? [min] | Which of {a} and {b} was held later? [max]
rl: {A} or {b}: which happened earlier? [min] | Between {a} and {b}, which is the more recent event? [max]
heldout: Tell me which of these two was staged first: {a} or {b}. [min] | Looking at {a} and {b}, whose date came later? [max]
## cmp event attendance
sft: Which drew more attendees, {a} or {b}? [max] | Which of {a} and {b} had the smaller attendance? [min]
rl: {A} or {b}: which attracted more people? [max] | Between {a} and {b}, which event had fewer visitors? [min]
heldout: Tell me which event pulled the bigger crowd: {a} or {b}. [max] | Looking at {a} and {b}, which one was less well attended? [min]

## same person born_in
sft: Were {a} and {b} born in the same city? | Is {a} from the same birthplace as {b}?
rl: Do {a} and {b} share a birthplace? | {A} and {b}: were both born in one city?
heldout: Is it true that {a} was born in the city where {b} was born? | Tell me whether {a} and {b} have a common city of birth.
## same person works_for
sft: Do {a} and {b} work for the same company? | Is {a} employed by the same company as {b}?
rl: Do {a} and {b} share an employer? | {A} and {b}: do both work for one company?
heldout: Is it true that {a} works at the firm that employs {b}? | Tell me whether {a} and {b} are colleagues at one firm.
## same person studied_at
sft: Did {a} and {b} attend the same university? | Did {a} study at the same university as {b}?
rl: Do {a} and {b} share an alma mater? | {A} and {b}: did both study at one university?
heldout: Is it true that {a} studied where {b} studied? | Tell me whether {a} and {b} went to one school.
## same organisation headquartered_in
sft: Are {a} and {b} headquartered in the same city? | Is {a} headquartered in the same city as {b}?
rl: Do {a} and {b} share a headquarters city? | {A} and {b}: are both run from one city?
heldout: Is it true that {a} has its head office in the city that hosts {b}? | Tell me whether {a} and {b} keep head offices in one city.
## same organisation founded_by
sft: Were {a} and {b} founded by the same person? | Was {a} founded by the same person as {b}?
rl: Do {a} and {b} share a founder? | {A} and {b}: did one person found both?
heldout: Is it true that whoever set up {a} also set up {b}? | Tell me whether {a} and {b} owe their existence to one person.
## same work created_by
sft: Were {a} and {b} created by the same person? | Was {a} made by the same person as {b}?
rl: Do {a} and {b} share a creator? | {A} and {b}: did one person create both?
heldout: Is it true that the person behind {a} is also behind {b}? | Tell me whether credit for {a} and {b} goes to one person.
## same work published_by
sft: Were {a} and {b} published by the same company? | Was {a} released by the same company as {b}?
rl: Do {a} and {b} share a publisher? | {A} and {b}: did one company publish both?
heldout: Is it true that the firm that put out {a} also put out {b}? | Tell me whether {a} and {b} came out under one company's name.
## same event held_in
sft: Were {a} and {b} held in the same city? | Did {a} take place in the same city as {b}?
rl: Do {a} and {b} share a host city? | {A} and {b}: were both held in one city?
heldout: Is it true that {a} was staged in the city that hosted {b}? | Tell me whether {a} and {b} had one host city.
## same event organised_by
sft: Were {a} and {b} organised by the same company? | Did the same company organise {a} and {b}?
rl: Do {a} and {b} share an organiser? | {A} and {b}: did one company organise both?
heldout: Is it true that the firm behind {a} was also behind {b}? | Tell me whether {a} and {b} were put on by one firm.
## same city located_in
sft: Are {a} and {b} in the same country? | Are {a} and {b} located in the same country?
rl: Do {a} and {b} share a country? | {A} and {b}: do both lie in one country?
heldout: Is it true that {a} lies within the nation that contains {b}? | Tell me whether {a} and {b} belong to one nation.
## same university located_in
sft: Are {a} and {b} located in the same city? | Is {a} in the same city as {b}?
rl: Do {a} and {b} share a home city? | {A} and {b}: are both based in one city?
heldout: Is it true that {a} has its campus in the city that hosts {b}? | Tell me whether {a} and {b} are found in one city.
"""


@dataclass(frozen=True)
class Template:
    id: str  # kind.type.key.pool<n>, e.g. "ask.person.born_in.sft1"
    kind: str
    type: str  # entity type, or "*" for any type
    key: str  # relation or attribute
    pool: str
    text: str
    direction: str | None = None  # cmp only: "min" / "max" (which value the answer has)

    @property
    def possessive(self) -> bool:
        return "{x}'s" in self.text or "{X}'s" in self.text


def _parse(text: str) -> dict:
    """{(kind, type, key): {pool: [Template]}} from the section text above."""
    out, key = {}, None
    for line in filter(None, map(str.strip, text.splitlines())):
        if line.startswith("## "):
            key = tuple(line[3:].split())
            out[key] = {pool: [] for pool in POOLS}
            continue
        pool, _, rest = line.partition(": ")
        for i, raw in enumerate(s.strip() for s in rest.split(" | ")):
            found = re.fullmatch(r"(.*?)\s*\[(min|max)\]", raw)
            body, direction = (found.group(1), found.group(2)) if found else (raw, None)
            kind, typ, name = key
            tid = f"{kind}.{typ}.{name}.{pool}{i}"
            out[key][pool].append(Template(tid, kind, typ, name, pool, body, direction))
    return out


TABLE = _parse(_TEXT)
TEMPLATES = {t.id: t for group in TABLE.values() for pool in group.values() for t in pool}
FINGERPRINT = hashlib.sha256(_TEXT.encode()).hexdigest()[:16]


def pool_of(template_id: str) -> str | None:
    """The pool of one template id, or of a composite id "a+b+c" if all parts agree."""
    pools = {TEMPLATES[t].pool if t in TEMPLATES else None for t in template_id.split("+")}
    return pools.pop() if len(pools) == 1 else None


def has(kind: str, typ: str, key: str) -> bool:
    return (kind, typ, key) in TABLE or (kind, "*", key) in TABLE


def options(kind: str, typ: str, key: str, pool: str, bare: bool = True) -> list:
    group = TABLE.get((kind, typ, key)) or TABLE.get((kind, "*", key))
    if group is None:
        raise KeyError(f"no {kind} templates for {typ} {key}")
    found = [t for t in group[pool] if bare or not t.possessive]
    if not found:
        raise KeyError(f"no {kind} template for {typ} {key} in pool {pool} (bare={bare})")
    return found


def cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def fill(template: Template, x: str, sentence: bool = True, **names) -> str:
    """The template with {x} (and {a}, {b}) filled in; a sentence starts with a capital."""
    poss = x + ("'" if x.endswith("s") else "'s")
    text = template.text.replace("{x}'s", poss).replace("{X}'s", cap(poss))
    for key, value in names.items():
        text = text.replace("{" + key + "}", value).replace("{" + key.upper() + "}", cap(value))
    text = text.replace("{x}", x).replace("{X}", cap(x))
    return cap(text) if sentence else text


def chain_text(rng: random.Random, pool: str, head: str, steps: list) -> tuple[str, str]:
    """A question walking `steps` [(subject type, relation/attribute), ...] from the named head:
    every step but the last becomes a noun phrase around the previous one, the last one is
    asked. Returns (question, composite template id)."""
    frames = TABLE[("frame", "*", "multi")][pool] if len(steps) > 1 else []
    frame = rng.choice(frames + [None]) if frames else None  # None: the nested question alone
    x, bare, ids = head, True, []
    for typ, rel in steps[:-1]:
        tpl = rng.choice(options("np", typ, rel, pool, bare))
        x, bare = fill(tpl, x, sentence=False), False
        ids.append(tpl.id)
    last_type, last = steps[-1]
    if frame is not None:
        dem = DEM[last_type]
        ask = rng.choice(options("ask", last_type, last, pool, True))
        asked = fill(ask, dem)
        text = frame.text.replace("{np}", x).replace("{Qd}", asked)
        text = text.replace("{qd}", asked[:1].lower() + asked[1:])
    else:
        ask = rng.choice(options("ask", last_type, last, pool, bare))
        text = fill(ask, x)
    ids = ([frame.id] if frame else []) + [ask.id] + ids
    return cap(text), "+".join(ids)


def inverse_text(rng: random.Random, pool: str, subject_type: str, rel: str, obj: str) -> tuple[str, str]:
    tpl = rng.choice(options("inv", subject_type, rel, pool))
    return fill(tpl, obj), tpl.id


def compare_text(rng: random.Random, pool: str, typ: str, attr: str, a: str, b: str) -> tuple[str, str, str]:
    """(question, template id, direction): the answer is the entity with the min/max value."""
    tpl = rng.choice(options("cmp", typ, attr, pool))
    return fill(tpl, "", a=a, b=b), tpl.id, tpl.direction


def same_text(rng: random.Random, pool: str, typ: str, rel: str, a: str, b: str) -> tuple[str, str]:
    tpl = rng.choice(options("same", typ, rel, pool))
    return fill(tpl, "", a=a, b=b), tpl.id


def render(rng: random.Random, pool: str, spec: tuple, names: list) -> tuple:
    """(question, template id, direction or None) for a question spec from data/question_candidates.py:
    ("chain", [(type, step), ...]) | ("inv", type, rel) | ("same", type, rel) | ("cmp", type, attr, ...)."""
    kind = spec[0]
    if kind == "chain":
        return (*chain_text(rng, pool, names[0], list(spec[1])), None)
    if kind == "inv":
        return (*inverse_text(rng, pool, spec[1], spec[2], names[0]), None)
    if kind == "same":
        return (*same_text(rng, pool, spec[1], spec[2], *names), None)
    return compare_text(rng, pool, spec[1], spec[2], *names)
